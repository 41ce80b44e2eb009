/* derive.c - the daemon's side of derived forms (protocol/derived.h):
 * runs tetris-derive on a pod's share image in a bounded child, and writes
 * the index entry once the form's tensors are published
 * (ingest_server.c's handle_derive publishes them like any claim).
 *
 * What bounds the child: it gets the image as a sealed copy the daemon
 * made (so the daemon hashes exactly what the child reads), a fresh
 * directory for its output, no other descriptor, no new privileges,
 * RLIMIT_AS/CPU/FSIZE/NOFILE, no core file, its own process group, and a
 * deadline after which the group is killed. A daemon that may change
 * users (can_drop_child) also has the child become DERIVE_UID:DERIVE_GID
 * (agent/unprivileged.h) before it reads the image, owner of its output
 * directory and of nothing else, and refuses a result whose reported
 * credentials are not those. A derivation at a time per
 * node: it is seconds to minutes of CPU, and the first instance of a
 * function runs on the plain weights meanwhile.
 *
 * No re-derivation: a source is claimed (derive_claim) before the index
 * is looked at, so a second ask for the same source waits for the first
 * and then finds its entry (derive_find) instead of deriving again. The
 * runtime an entry must match is the child's (derive_runtime asks
 * tetris-derive once per runtime and keeps the answer): what the daemon
 * publishes is named by what made it, never by what a pod says it runs.
 * A pod's ask may name one of the runtimes the daemon derives with (its
 * own, the operator's --derive-runtimes), never a library. */
#include "reclaimer/derive.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/fileio.h"
#include "common/clock.h"
#include "common/log.h"
#include "protocol/ingest.h"
#include "reclaimer/trusted_path.h"

#define DERIVE_TIMEOUT_MS (10 * 60 * 1000)
/* ASan reserves terabytes of address space for its shadow, so a sanitizer
 * build (make SAN=1) leaves the address-space bound to the release one. */
#ifdef __SANITIZE_ADDRESS__
#define DERIVE_MAX_AS 0
#else
#define DERIVE_MAX_AS (32ull << 30)
#endif
#define DERIVE_MAX_FILE (16ull << 30)
/* Who the child runs as when the daemon is root: "nobody" and "nogroup"
 * on Debian, a user that owns no file of the node. The store's public
 * directory is readable by all (pods mount it), so the child can read its
 * inputs; it can write only its output directory and what the whole
 * system may write. A constant rather than a setting: a node that gives
 * 65534 to pods on the host's user namespace should change it here (the
 * child and such a pod could signal each other, nothing more: the child
 * is not dumpable). */
#define DERIVE_UID 65534
#define DERIVE_GID 65534
#define DERIVE_STDOUT_MAX 1024

static pthread_mutex_t derive_lock = PTHREAD_MUTEX_INITIALIZER;

/* Sources being derived or looked up (derive_claim), each once. */
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t claims_released = PTHREAD_COND_INITIALIZER;
static struct derive_claim *claims;

/* The runtimes the child derives with (derive_runtime): slot 0 its own,
 * then the operator's libraries; each one's name "" until asked. */
static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static struct derive_runtime runtimes[1 + RECLAIMER_DERIVE_RUNTIMES_MAX];
static size_t n_runtimes;

int derive_copy_image(int client_fd, int *out_fd, tensor_digest *source, tetris_error *err)
{
    struct stat st;
    if (fstat(client_fd, &st) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "derive: the image descriptor");
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (uint64_t)st.st_size > INGEST_MAX_DERIVE_IMAGE)
        return tetris_fail(err, TETRIS_E_FORMAT, 0,
                           "derive: the image must be a regular file of 1 to %u bytes",
                           INGEST_MAX_DERIVE_IMAGE);
    size_t len = (size_t)st.st_size;
    cleanup_free uint8_t *buf = malloc(len);
    if (buf == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "derive: image");
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(client_fd, buf + got, len - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return tetris_fail(err, TETRIS_E_FORMAT, r < 0 ? errno : 0,
                               "derive: the image could not be read whole");
        got += (size_t)r;
    }
    derived_source_digest(buf, len, source);
    int fd = memfd_create("tetris-derive-image", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "derive: memfd_create");
    if (fd_write_all(fd, buf, len, "derive: the image copy", err) < 0) {
        close(fd);
        return -TETRIS_E_IO;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0 ||
        lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return tetris_fail(err, TETRIS_E_IO, errno, "derive: seal the image copy");
    }
    *out_fd = fd;
    return 0;
}

/* tetris-derive beside the daemon's own executable. */
static int derive_program(char *out, size_t cap, tetris_error *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno, "derive: /proc/self/exe");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    if ((size_t)snprintf(out, cap, "%s/tetris-derive", self) >= cap)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "derive: path too long");
    if (access(out, X_OK) != 0)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, errno,
                           "derive: %s is not there: derived forms are off on this node", out);
    return 0;
}

/* Whether the daemon can give its child another user: it needs
 * CAP_SETUID and CAP_SETGID (passed to the child, which drops them) and
 * CAP_CHOWN for the output directory. The chart's daemon holds none, so
 * its child keeps uid 0 without capabilities; said once. */
static bool can_drop_child(void)
{
    static atomic_bool said;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof(data));
    uint32_t need = (1u << CAP_SETUID) | (1u << CAP_SETGID) | (1u << CAP_CHOWN);
    bool can = syscall(SYS_capget, &hdr, data) == 0 && (data[0].effective & need) == need;
    if (!can && !atomic_exchange(&said, true))
        log_warn("event=derive-child-privileged uid=%d hint=\"the daemon lacks CAP_SETUID, "
                 "CAP_SETGID or CAP_CHOWN: tetris-derive keeps its uid\"",
                 (int)geteuid());
    return can;
}

static void set_limit(int resource, rlim_t value)
{
    struct rlimit rl = {value, value};
    if (setrlimit(resource, &rl) != 0)
        _exit(127);
}

/* In the child, before exec: only descriptor 3 (the image) and the pipe
 * on stdout remain; stderr stays the daemon's log. Without an image
 * (image_fd -1) it only asks the runtime's name (--runtime). lib: the
 * runtime's library, "" for tetris-derive's own. */
static void child_exec(const char *program, int image_fd, int out_pipe, const char *external_dir,
                       const char *out_dir, const char *lib, bool unprivileged)
{
    setpgid(0, 0);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        _exit(127);
    if (DERIVE_MAX_AS > 0)
        set_limit(RLIMIT_AS, DERIVE_MAX_AS);
    set_limit(RLIMIT_CPU, DERIVE_TIMEOUT_MS / 1000);
    set_limit(RLIMIT_FSIZE, DERIVE_MAX_FILE);
    set_limit(RLIMIT_CORE, 0);
    if (dup2(out_pipe, STDOUT_FILENO) < 0 || (image_fd >= 0 && dup2(image_fd, 3) != 3))
        _exit(127);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0)
        _exit(127);
    closefrom(4);
    set_limit(RLIMIT_NOFILE, 64);
    char uid[16], gid[16];
    snprintf(uid, sizeof(uid), "%d", DERIVE_UID);
    snprintf(gid, sizeof(gid), "%d", DERIVE_GID);
    /* The program's name, at most 12 arguments, the NULL. */
    char *argv[14] = {(char *)program, "--graph-fd",   "3", "--external-dir", (char *)external_dir,
                      "--out-dir",     (char *)out_dir};
    size_t n = 7;
    char *probe[5] = {(char *)program, "--runtime"};
    if (unprivileged) {
        argv[n++] = "--uid";
        argv[n++] = uid;
        argv[n++] = "--gid";
        argv[n++] = gid;
    }
    if (lib[0] != '\0') {
        argv[n++] = probe[2] = "--runtime-lib";
        argv[n++] = probe[3] = (char *)lib;
    }
    argv[n] = NULL;
    /* A clean environment; the sanitizers' own settings pass (their
     * suppressions name ONNX Runtime's leaks, make SAN=1). */
    static const char *const pass[] = {"ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS"};
    char *envp[2 + sizeof(pass) / sizeof(pass[0])] = {"TETRIS_LOG_LEVEL=warn"};
    size_t n_env = 1;
    for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++) {
        const char *v = getenv(pass[i]);
        char *kv = NULL;
        if (v != NULL && asprintf(&kv, "%s=%s", pass[i], v) > 0)
            envp[n_env++] = kv;
    }
    envp[n_env] = NULL;
    execve(program, image_fd >= 0 ? argv : probe, envp);
    _exit(127);
}

/* Reads the child's one line of output and waits for it, killing its
 * group past the deadline or once stop_fd is readable (the daemon is
 * stopping: a derivation must not hold its shutdown for minutes). */
static int child_wait(pid_t pid, int pipe_fd, int stop_fd, char *line, size_t cap,
                      tetris_error *err)
{
    int64_t deadline = clock_mono_ms() + DERIVE_TIMEOUT_MS;
    size_t n = 0;
    bool timed_out = false, stopped = false;
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd p[2] = {{.fd = pipe_fd, .events = POLLIN}, {.fd = stop_fd, .events = POLLIN}};
        int r = poll(p, 2, left > 1000 ? 1000 : (int)left);
        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0)
            continue;
        if (p[1].revents != 0) {
            stopped = true;
            break;
        }
        ssize_t got = read(pipe_fd, line + n, cap - 1 - n);
        if (got <= 0)
            break; /* EOF: the child closed stdout (exited) */
        n += (size_t)got;
        if (n == cap - 1)
            break;
    }
    line[n] = '\0';
    if (timed_out || stopped)
        kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    /* Nothing the child left behind in its group outlives it. */
    kill(-pid, SIGKILL);
    if (timed_out)
        return tetris_fail(err, TETRIS_E_TIMEOUT, 0, "derive: no result within %d s",
                           DERIVE_TIMEOUT_MS / 1000);
    if (stopped)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "derive: the daemon is stopping");
    if (WIFSIGNALED(status))
        return tetris_fail(err, TETRIS_E_RUNTIME, 0, "derive: tetris-derive died of signal %d",
                           WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return tetris_fail(err, WEXITSTATUS(status) == 3 ? TETRIS_E_FORMAT : TETRIS_E_RUNTIME, 0,
                           "derive: tetris-derive exited %d (its log says why)",
                           WEXITSTATUS(status));
    return 0;
}

/* The child's result line: its runtime, and the credentials it ran with,
 * which must be the unprivileged ones when the daemon asked for them. */
static int parse_result(const char *line, bool unprivileged, struct derive_output *out,
                        tetris_error *err)
{
    json_error_t jerr;
    json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
    const char *s = json_string_value(json_object_get(j, "runtime"));
    json_t *uid = json_object_get(j, "uid"), *gid = json_object_get(j, "gid");
    json_t *prepacked = json_object_get(j, "prepacked_bytes");
    const char *cap_eff = json_string_value(json_object_get(j, "cap_eff"));
    int rc = 0;
    if (s == NULL || s[0] == '\0' || strlen(s) >= sizeof(out->runtime) || strchr(s, '/') != NULL)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "derive: tetris-derive printed no runtime");
    else if (!json_is_integer(uid) || !json_is_integer(gid) || cap_eff == NULL)
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0, "derive: tetris-derive printed no credentials");
    else if (!json_is_integer(prepacked) || json_integer_value(prepacked) < 0 ||
             !json_is_boolean(json_object_get(j, "ort")))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "derive: tetris-derive printed no pre-packed bytes or ORT part");
    if (rc == 0) {
        snprintf(out->runtime, sizeof(out->runtime), "%s", s);
        out->uid = (long long)json_integer_value(uid);
        out->gid = (long long)json_integer_value(gid);
        out->capabilities = strspn(cap_eff, "0") != strlen(cap_eff);
        out->prepacked_bytes = (uint64_t)json_integer_value(prepacked);
        out->has_ort = json_is_true(json_object_get(j, "ort"));
    }
    if (rc == 0 && unprivileged &&
        (out->uid != DERIVE_UID || out->gid != DERIVE_GID || out->capabilities ||
         json_integer_value(json_object_get(j, "groups")) != 0 ||
         !json_is_true(json_object_get(j, "no_new_privs"))))
        rc = tetris_fail(err, TETRIS_E_DENIED, 0,
                         "derive: tetris-derive ran as uid %lld gid %lld, not %d:%d without "
                         "groups or capabilities",
                         out->uid, out->gid, DERIVE_UID, DERIVE_GID);
    json_decref(j);
    return rc;
}

/* The child owned the directory: what is there may be a link or a FIFO
 * rather than what it should have written. */
static int open_output(const char *dir, const char *name, int *out, tetris_error *err)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    *out = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*out < 0)
        return tetris_fail(err, TETRIS_E_RUNTIME, errno, "derive: %s not written", name);
    if (fstat(*out, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)
        return tetris_fail(err, TETRIS_E_RUNTIME, errno, "derive: %s is not a file of its own",
                           name);
    return 0;
}

/* Removes the child's output directory (the outputs stay open). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    rmdir(dir);
}

/* Forks, execs tetris-derive (child_exec) and waits for its line. */
static int run_child(const char *program, int image_fd, const char *public_dir, const char *dir,
                     const char *lib, bool unprivileged, int stop_fd, char *line, size_t cap,
                     tetris_error *err)
{
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "derive: pipe");
    pid_t pid = fork();
    if (pid == 0)
        child_exec(program, image_fd, pipe_fds[1], public_dir, dir, lib, unprivileged);
    close(pipe_fds[1]);
    int rc = pid < 0 ? tetris_fail(err, TETRIS_E_IO, errno, "derive: fork")
                     : child_wait(pid, pipe_fds[0], stop_fd, line, cap, err);
    close(pipe_fds[0]);
    return rc;
}

/* Asks tetris-derive the name of rt's runtime (runtime_lock held). A
 * library is asked only if root alone could have written it. */
static int ask_runtime(const char *program, struct derive_runtime *rt, int stop_fd,
                       tetris_error *err)
{
    char line[DERIVE_STDOUT_MAX], lib[PATH_MAX];
    int rc = 0;
    snprintf(lib, sizeof(lib), "%s", rt->lib);
    if (rt->lib[0] != '\0')
        rc = trusted_path_resolve("derive runtime", rt->lib, lib, sizeof(lib), err);
    if (rc == 0)
        rc = run_child(program, -1, NULL, NULL, lib, false, stop_fd, line, sizeof(line), err);
    json_t *j = rc == 0 ? json_loads(line, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *s = json_string_value(json_object_get(j, "runtime"));
    if (rc == 0 && !derived_name_valid(s))
        rc = tetris_fail(err, TETRIS_E_PROTOCOL, 0,
                         "derive: tetris-derive --runtime printed no runtime");
    if (rc == 0) {
        snprintf(rt->name, sizeof(rt->name), "%s", s);
        snprintf(rt->lib, sizeof(rt->lib), "%s", lib);
        log_info("event=derive-runtime runtime=%s lib=%s", LOG_Q(rt->name),
                 LOG_Q(rt->lib[0] != '\0' ? rt->lib : "tetris-derive's own"));
    }
    json_decref(j);
    return rc;
}

int derive_runtime(const struct reclaimer_derive_runtimes *libs, const char *want, int stop_fd,
                   struct derive_runtime *out, tetris_error *err)
{
    char program[PATH_MAX];
    int rc = derive_program(program, sizeof(program), err);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&runtime_lock);
    if (n_runtimes == 0) {
        n_runtimes = 1;
        for (size_t i = 0; i < libs->n; i++)
            snprintf(runtimes[n_runtimes++].lib, sizeof(runtimes[0].lib), "%s", libs->libs[i]);
    }
    size_t n = want[0] == '\0' ? 1 : n_runtimes;
    bool found = false;
    char names[512] = "";
    for (size_t i = 0; i < n && !found && rc == 0; i++) {
        tetris_error why;
        struct derive_runtime *rt = &runtimes[i];
        if (rt->name[0] == '\0' && ask_runtime(program, rt, stop_fd, &why) < 0) {
            /* tetris-derive's own, or a stop: the ask fails; a library
             * that cannot be asked is left out of this answer. */
            if (i == 0 || why.code == TETRIS_E_UNAVAILABLE)
                rc = tetris_fail(err, why.code, 0, "%s", why.msg);
            else
                log_warn("event=derive-runtime-refused lib=%s msg=%s", LOG_Q(rt->lib),
                         LOG_Q(why.msg));
            continue;
        }
        found = want[0] == '\0' || strcmp(rt->name, want) == 0;
        if (found)
            *out = *rt;
        size_t used = strlen(names), len = strlen(rt->name);
        if (used + len + 3 < sizeof(names)) {
            memcpy(names + used, used > 0 ? ", " : "", used > 0 ? 2 : 0);
            used += used > 0 ? 2 : 0;
            memcpy(names + used, rt->name, len + 1);
        }
    }
    pthread_mutex_unlock(&runtime_lock);
    if (rc == 0 && !found)
        rc = tetris_fail(err, TETRIS_E_NOTFOUND, 0,
                         "derive: no runtime \"%s\" on this node (it derives with: %s)", want,
                         names);
    return rc;
}

/* The child reported another runtime than the one its library had: the
 * library was replaced. The new name is kept; this derivation fails. */
static int check_runtime(const struct derive_runtime *rt, const char *made_with, tetris_error *err)
{
    if (strcmp(rt->name, made_with) == 0)
        return 0;
    pthread_mutex_lock(&runtime_lock);
    for (size_t i = 0; i < n_runtimes; i++)
        if (strcmp(runtimes[i].lib, rt->lib) == 0)
            snprintf(runtimes[i].name, sizeof(runtimes[i].name), "%s", made_with);
    pthread_mutex_unlock(&runtime_lock);
    log_warn("event=derive-runtime-changed lib=%s was=%s now=%s", LOG_Q(rt->lib), LOG_Q(rt->name),
             LOG_Q(made_with));
    return tetris_fail(err, TETRIS_E_RUNTIME, 0, "derive: the form was made with %s, not %s",
                       made_with, rt->name);
}

static bool claimed(const tensor_digest *source)
{
    for (const struct derive_claim *c = claims; c != NULL; c = c->next)
        if (memcmp(&c->source, source, sizeof(*source)) == 0)
            return true;
    return false;
}

void derive_claim(struct derive_claim *c, const tensor_digest *source)
{
    pthread_mutex_lock(&claims_lock);
    while (claimed(source))
        pthread_cond_wait(&claims_released, &claims_lock);
    c->source = *source;
    c->next = claims;
    claims = c;
    pthread_mutex_unlock(&claims_lock);
}

void derive_release(struct derive_claim *c)
{
    pthread_mutex_lock(&claims_lock);
    struct derive_claim **at = &claims;
    while (*at != c)
        at = &(*at)->next;
    *at = c->next;
    pthread_cond_broadcast(&claims_released);
    pthread_mutex_unlock(&claims_lock);
}

bool derive_find(store *s, const tensor_digest *source, const char *transform, const char *runtime,
                 const char *cpu, derived_entry *e)
{
    tetris_error ignored;
    if (derived_entry_lookup(store_public_dir(s), transform, runtime, cpu, source, e, &ignored) < 0)
        return false;
    for (size_t i = 0; i < derived_entry_parts(e); i++)
        if (!store_has_tensor(s, &derived_entry_part(e, i)->digest))
            return false;
    return true;
}

int derive_make(const char *store_root, const char *public_dir, int image_fd,
                const tensor_digest *source, const struct derive_runtime *rt, int stop_fd,
                struct derive_output *out, tetris_error *err)
{
    char program[PATH_MAX], dir[PATH_MAX], line[DERIVE_STDOUT_MAX];
    memset(out, 0, sizeof(*out));
    out->graph_fd = out->data_fd = out->ort_fd = -1;
    out->source = *source;
    int rc = derive_program(program, sizeof(program), err);
    if (rc == 0)
        rc = derived_cpu_features(out->cpu, sizeof(out->cpu), err);
    if (rc < 0)
        return rc;
    snprintf(dir, sizeof(dir), "%s/private/tmp/derive-XXXXXX", store_root);
    if (mkdtemp(dir) == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "derive: mkdtemp");
    bool unprivileged = can_drop_child();
    /* The child's user owns the directory; the daemon, without
     * CAP_DAC_OVERRIDE in the chart, must still enter it to read the
     * results (nobody else can: private/ is root's alone). */
    if (unprivileged && (chmod(dir, 0711) != 0 || chown(dir, DERIVE_UID, DERIVE_GID) != 0)) {
        rc = tetris_fail(err, TETRIS_E_IO, errno, "derive: chown %s", dir);
        remove_dir(dir);
        return rc;
    }
    pthread_mutex_lock(&derive_lock);
    int64_t start = clock_mono_ms();
    rc = run_child(program, image_fd, public_dir, dir, rt->lib, unprivileged, stop_fd, line,
                   sizeof(line), err);
    pthread_mutex_unlock(&derive_lock);
    if (rc == 0)
        rc = parse_result(line, unprivileged, out, err);
    if (rc == 0)
        rc = check_runtime(rt, out->runtime, err);
    if (rc == 0)
        rc = open_output(dir, "graph.onnx", &out->graph_fd, err);
    if (rc == 0)
        rc = open_output(dir, DERIVED_DATA_LOCATION, &out->data_fd, err);
    /* The ORT-format part only when the child says it made it (and then
     * it must be there): a file it left unsaid is removed with the rest. */
    if (rc == 0 && out->has_ort)
        rc = open_output(dir, DERIVED_ORT_FILE, &out->ort_fd, err);
    remove_dir(dir);
    if (rc < 0) {
        derive_output_close(out);
        return rc;
    }
    out->took_ms = clock_mono_ms() - start;
    return 0;
}

void derive_output_close(struct derive_output *out)
{
    if (out->graph_fd >= 0)
        close(out->graph_fd);
    if (out->data_fd >= 0)
        close(out->data_fd);
    if (out->ort_fd >= 0)
        close(out->ort_fd);
    out->graph_fd = out->data_fd = out->ort_fd = -1;
}

int derive_write_entry(const char *public_dir, const derived_entry *e, tetris_error *err)
{
    char dir[PATH_MAX], tmp[PATH_MAX + 16], path[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/%s", public_dir, DERIVED_DIR);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", dir);
    cleanup_free char *text = derived_entry_encode(e);
    if (text == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "derived entry");
    snprintf(tmp, sizeof(tmp), "%s/.tmp-XXXXXX", dir);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return tetris_fail(err, TETRIS_E_IO, errno, "%s", dir);
    size_t len = strlen(text);
    bool ok = write(fd, text, len) == (ssize_t)len && fchmod(fd, 0444) == 0 && fsync(fd) == 0;
    int saved = errno;
    close(fd);
    derived_entry_path(public_dir, &e->identity, path, sizeof(path));
    if (!ok || rename(tmp, path) != 0) {
        saved = ok ? errno : saved;
        unlink(tmp);
        return tetris_fail(err, TETRIS_E_IO, saved, "%s", path);
    }
    return 0;
}
