/* test_store.c - the tensor store's API on a real directory under /dev/shm:
 * layout and options, publish/map/remove/quarantine, read-only mappings,
 * trailer and byte corruption, capacity, tenants, read-only opens, holders
 * and their liveness, repair, and the use lock. Multi-process and crash
 * behaviour is in tests/tensorstore/. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensorstore/store.h"
#include "tests/lib/unit.h"

/* Every test's stores, under one scratch directory removed at exit. */
static const char *base_dir;

/* A fresh directory for one test. */
static char *new_dir(void)
{
    char *dir;
    ck_assert_int_ge(asprintf(&dir, "%s/s.XXXXXX", base_dir), 0);
    ck_assert_ptr_nonnull(mkdtemp(dir));
    chmod(dir, 0755);
    return dir;
}

static store *open_store(const char *dir, uint64_t capacity, const char *tenant)
{
    struct store_options o = {.create = true, .capacity_bytes = capacity, .tenant = tenant};
    store *s = NULL;
    tetris_error err;
    int rc = store_open(dir, &o, &s, &err);
    ck_assert_msg(rc == 0, "store_open: %s", err.msg);
    return s;
}

/* A float32 tensor of n elements with deterministic content. */
struct test_tensor {
    tensor_meta meta;
    float *data;
};

static struct test_tensor make_tensor(size_t n, unsigned seed)
{
    struct test_tensor t;
    memset(&t, 0, sizeof t);
    strcpy(t.meta.dtype, "float32");
    t.meta.ndim = 1;
    t.meta.shape[0] = (int64_t)n;
    t.meta.nbytes = n * sizeof(float);
    t.data = malloc(t.meta.nbytes + 1);
    ck_assert_ptr_nonnull(t.data);
    for (size_t i = 0; i < n; i++)
        t.data[i] = (float)(seed * 1000003u + i);
    tetris_error err;
    ck_assert_int_eq(tensor_digest_compute(&t.meta, t.data, &err), 0);
    return t;
}

static int fill_copy(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    (void)err;
    memcpy(dst, ctx, len);
    return 0;
}

static int fill_scribble(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    (void)err;
    memcpy(dst, ctx, len);
    ((unsigned char *)dst)[len / 2] ^= 0x40;
    return 0;
}

static int fill_fail(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    (void)ctx;
    memset(dst, 0, len / 2);
    return tetris_fail(err, TETRIS_E_IO, EIO, "source went away");
}

/* Chunked-source callbacks: ctx is the tensor's bytes. */
static int read_copy(void *ctx, void *dst, uint64_t offset, size_t len, tetris_error *err)
{
    (void)err;
    memcpy(dst, (const unsigned char *)ctx + offset, len);
    return 0;
}

static int read_scribble(void *ctx, void *dst, uint64_t offset, size_t len, tetris_error *err)
{
    (void)err;
    memcpy(dst, (const unsigned char *)ctx + offset, len);
    if (offset == 0)
        ((unsigned char *)dst)[len - 1] ^= 0x01;
    return 0;
}

static int read_fail_late(void *ctx, void *dst, uint64_t offset, size_t len, tetris_error *err)
{
    if (offset > 0)
        return tetris_fail(err, TETRIS_E_IO, EIO, "source went away at %llu",
                           (unsigned long long)offset);
    memcpy(dst, ctx, len);
    return 0;
}

static void publish(store *s, struct test_tensor *t, bool expect_new)
{
    tetris_error err;
    bool published = !expect_new;
    int rc = store_publish_tensor(s, &t->meta, fill_copy, t->data, &published, &err);
    ck_assert_msg(rc == 0, "publish: %s", err.msg);
    ck_assert(published == expect_new);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

static char *tensor_path(store *s, const tensor_digest *d)
{
    char hex[TENSOR_DIGEST_HEX_LEN + 1];
    tensor_digest_to_hex(d, hex);
    char *p;
    ck_assert_int_ge(asprintf(&p, "%s/public/tensors/%.2s/%s", store_root(s), hex, hex), 0);
    return p;
}

/* A 64-element tensor (seeds from first_seed on) whose fanout directory
 * is of's (same) or another one (!same). */
static struct test_tensor tensor_by_fanout(const struct test_tensor *of, bool same,
                                           unsigned first_seed)
{
    for (unsigned seed = first_seed;; seed++) {
        struct test_tensor t = make_tensor(64, seed);
        if ((t.meta.digest.bytes[0] == of->meta.digest.bytes[0]) == same)
            return t;
        free(t.data);
    }
}

/* sub is a path in the store as it was before the public/private split
 * ("tmp/x", "tensors"): where it lives now. */
static char *sub_path(store *s, const char *sub)
{
    bool public = strncmp(sub, "tensors", 7) == 0 || strcmp(sub, ".tetris-store") == 0;
    if (strcmp(sub, ".use.lock") == 0)
        sub = "use.lock";
    char *p;
    ck_assert_int_ge(asprintf(&p, "%s/%s/%s", store_root(s), public ? "public" : "private", sub),
                     0);
    return p;
}

/* ---- layout and options ---- */

START_TEST(open_creates_layout_and_reopens)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    ck_assert_str_eq(store_root(s), dir);
    const char *subs[] = {"tensors", "tmp", "locks", "holders", "quarantine", ".use.lock",
                          ".tetris-store"};
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char *p = sub_path(s, subs[i]);
        ck_assert_msg(access(p, F_OK) == 0, "missing %s", p);
        free(p);
    }
    /* What pods mount is readable; what coordinates writers is not. */
    struct stat st;
    char *pub, *priv;
    ck_assert_int_ge(asprintf(&pub, "%s/public", dir), 0);
    ck_assert_int_ge(asprintf(&priv, "%s/private", dir), 0);
    ck_assert_int_eq(stat(pub, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0755);
    ck_assert_int_eq(stat(priv, &st), 0);
    ck_assert_uint_eq(st.st_mode & 0777, 0700);
    ck_assert_str_eq(store_public_dir(s), pub);
    store_close(s);

    /* A reader given public/ alone (a pod's mount) finds the store. */
    store *ro = NULL;
    tetris_error rerr;
    struct store_options rdonly = {.read_only = true};
    ck_assert_int_eq(store_open(pub, &rdonly, &ro, &rerr), 0);
    ck_assert_str_eq(store_public_dir(ro), pub);
    store_close(ro);
    struct store_options rw = {0};
    ck_assert_int_eq(store_open(pub, &rw, &ro, &rerr), -TETRIS_E_INVAL);
    free(pub);
    free(priv);

    store *again = NULL;
    tetris_error err;
    struct store_options plain = {0};
    ck_assert_int_eq(store_open(dir, &plain, &again, &err), 0);
    ck_assert_uint_eq(store_capacity(again), 0);
    store_close(again);
    free(dir);
}
END_TEST

START_TEST(open_rejects_missing_and_foreign)
{
    tetris_error err;
    store *s = NULL;
    char *dir = new_dir();
    struct store_options plain = {0};
    ck_assert_int_eq(store_open(dir, &plain, &s, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a tetris store"));

    char *missing;
    ck_assert_int_ge(asprintf(&missing, "%s/nope", dir), 0);
    ck_assert_int_eq(store_open(missing, &plain, &s, &err), -TETRIS_E_NOTFOUND);

    struct store_options bad = {.create = true, .read_only = true};
    ck_assert_int_eq(store_open(dir, &bad, &s, &err), -TETRIS_E_INVAL);

    /* A marker that is not ours. */
    char *marker;
    ck_assert_int_ge(asprintf(&marker, "%s/.tetris-store", dir), 0);
    unit_write_text(marker, "{\"format\": \"something-else\"}");
    ck_assert_int_eq(store_open(dir, &plain, &s, &err), -TETRIS_E_FORMAT);
    unit_write_text(marker, "{not json");
    ck_assert_int_eq(store_open(dir, &plain, &s, &err), -TETRIS_E_FORMAT);
    free(marker);
    free(missing);
    free(dir);
}
END_TEST

/* ---- publish and map ---- */

/* The cheap presence check counts regular files of a tensor's size at
 * least a trailer's: not a link, a directory or a stub. */
START_TEST(presence_is_a_regular_file_not_a_link)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(10, 3), other = make_tensor(10, 4);
    publish(s, &other, true);
    char *path = tensor_path(s, &t.meta.digest), *target = tensor_path(s, &other.meta.digest);
    char *fan = strdup(path);
    *strrchr(fan, '/') = '\0';
    mkdir(fan, 0755);
    ck_assert_int_eq(symlink(target, path), 0);
    ck_assert(!store_tensor_present(s, &t.meta.digest));
    ck_assert_int_eq(unlink(path), 0);
    unit_write_text(path, "x");
    ck_assert(!store_tensor_present(s, &t.meta.digest));
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    ck_assert(!store_tensor_present(s, &t.meta.digest));
    ck_assert_int_eq(rmdir(path), 0);
    publish(s, &t, true);
    ck_assert(store_tensor_present(s, &t.meta.digest));
    free(fan);
    free(path);
    free(target);
    free(t.data);
    free(other.data);
    store_close(s);
    free(dir);
}
END_TEST

/* A handle opens a fanout directory once and keeps it (publish.c:
 * fanout_dir): a second tensor of that directory lands beside the first,
 * and a link planted in place of a directory the handle has not opened is
 * refused, nothing written through it and no temp file left. */
START_TEST(publish_keeps_fanout_directories_and_refuses_links)
{
    char *dir = new_dir(), *elsewhere = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor first = make_tensor(64, 1), second = tensor_by_fanout(&first, true, 2);
    publish(s, &first, true);
    publish(s, &second, true);
    char *a = tensor_path(s, &first.meta.digest), *b = tensor_path(s, &second.meta.digest);
    struct stat sa, sb;
    ck_assert_int_eq(stat(a, &sa), 0);
    ck_assert_int_eq(stat(b, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 07777, 0444);
    *strrchr(a, '/') = '\0';
    *strrchr(b, '/') = '\0';
    ck_assert_str_eq(a, b);

    struct test_tensor linked = tensor_by_fanout(&first, false, 1000);
    char *path = tensor_path(s, &linked.meta.digest);
    *strrchr(path, '/') = '\0';
    ck_assert_int_eq(symlink(elsewhere, path), 0);
    tetris_error err;
    bool published = true;
    ck_assert_int_lt(store_publish_tensor(s, &linked.meta, fill_copy, linked.data, &published,
                                          &err),
                     0);
    ck_assert(!published);
    ck_assert_int_eq(count_files(elsewhere), 0);
    char *tmp = sub_path(s, "tmp");
    ck_assert_int_eq(count_files(tmp), 0);
    ck_assert(!store_tensor_present(s, &linked.meta.digest));
    free(tmp);
    free(path);
    free(a);
    free(b);
    free(first.data);
    free(second.data);
    free(linked.data);
    store_close(s);
    free(elsewhere);
    free(dir);
}
END_TEST

/* store_prepare_publish makes every lock stripe and fanout directory, is
 * idempotent (a second call, and one after a stripe went missing), refuses
 * a link planted in place of a fanout directory, and leaves publishing as
 * it was, also into a fanout directory removed after it was opened. */
START_TEST(prepare_publish_makes_stripes_and_fanouts)
{
    char *dir = new_dir(), *elsewhere = new_dir();
    store *s = open_store(dir, 0, NULL);
    char *locks = sub_path(s, "locks"), *tensors = sub_path(s, "tensors");
    tetris_error err;
    ck_assert_int_eq(count_files(locks), 0);
    ck_assert_int_eq(count_files(tensors), 0);
    ck_assert_int_eq(store_prepare_publish(s, &err), 0);
    ck_assert_int_eq(count_files(locks), 4096);
    ck_assert_int_eq(count_files(tensors), 256);
    char *last;
    ck_assert_int_ge(asprintf(&last, "%s/fff", locks), 0);
    struct stat st;
    ck_assert_int_eq(stat(last, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    ck_assert_int_eq(store_prepare_publish(s, &err), 0);
    ck_assert_int_eq(unlink(last), 0);
    ck_assert_int_eq(store_prepare_publish(s, &err), 0);
    ck_assert_int_eq(count_files(locks), 4096);

    struct test_tensor t = make_tensor(64, 7);
    publish(s, &t, true);
    ck_assert(store_has_tensor(s, &t.meta.digest));
    /* A fanout directory removed under the handle's kept descriptor is
     * made again by the next publish into it. */
    struct test_tensor u = tensor_by_fanout(&t, false, 8), v = tensor_by_fanout(&u, true, 100);
    publish(s, &v, true);
    char *removed = tensor_path(s, &v.meta.digest);
    ck_assert_int_eq(unlink(removed), 0);
    *strrchr(removed, '/') = '\0';
    ck_assert_int_eq(rmdir(removed), 0);
    publish(s, &u, true);
    ck_assert(store_has_tensor(s, &u.meta.digest));
    free(removed);
    /* The linked fanout directory must be an empty one: neither t's nor u's. */
    unsigned linked = t.meta.digest.bytes[0] ^ 1u;
    while (linked == u.meta.digest.bytes[0] || linked == t.meta.digest.bytes[0])
        linked = (linked + 1) % 256;
    free(u.data);
    free(v.data);
    store_close(s);

    /* A link in place of a fanout directory fails the preparation of a
     * fresh handle, and nothing is made through it. */
    char *fanout;
    ck_assert_int_ge(asprintf(&fanout, "%s/%02x", tensors, linked), 0);
    ck_assert_int_eq(rmdir(fanout), 0);
    ck_assert_int_eq(symlink(elsewhere, fanout), 0);
    s = open_store(dir, 0, NULL);
    ck_assert_int_lt(store_prepare_publish(s, &err), 0);
    ck_assert_msg(strstr(err.msg, "prepare store") != NULL, "%s", err.msg);
    ck_assert_int_eq(count_files(elsewhere), 0);
    ck_assert(store_has_tensor(s, &t.meta.digest));
    store_close(s);
    free(fanout);
    free(t.data);
    free(last);
    free(locks);
    free(tensors);
    free(elsewhere);
    free(dir);
}
END_TEST

/* Publishes tensors of seeds first_seed.. into n distinct fanout
 * directories; returns the seed after the last one used. */
static unsigned publish_into_fanouts(store *s, unsigned first_seed, int n)
{
    bool used[256] = {false};
    unsigned seed = first_seed;
    for (int made = 0; made < n; seed++) {
        struct test_tensor t = make_tensor(64, seed);
        if (!used[t.meta.digest.bytes[0]]) {
            used[t.meta.digest.bytes[0]] = true;
            publish(s, &t, true);
            ck_assert(store_has_tensor(s, &t.meta.digest));
            made++;
        }
        free(t.data);
    }
    return seed;
}

/* The fanout descriptors the process's handles keep are bounded by a
 * quarter of the soft descriptor limit: past it, publishing still works,
 * each publish opening and closing its directory; a closed handle gives
 * its places back to the next one. */
START_TEST(kept_fanout_descriptors_stay_within_budget)
{
    struct rlimit saved, low;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &saved), 0);
    low = saved;
    low.rlim_cur = 64; /* a budget of 16 */
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    char *dir = new_dir();

    store *s = open_store(dir, 0, NULL);
    int handle_fds = count_files("/proc/self/fd");
    unsigned seed = publish_into_fanouts(s, 1, 40);
    ck_assert_int_eq(count_files("/proc/self/fd"), handle_fds + 16);
    store_close(s);

    s = open_store(dir, 0, NULL);
    handle_fds = count_files("/proc/self/fd");
    publish_into_fanouts(s, seed, 10);
    ck_assert_int_eq(count_files("/proc/self/fd"), handle_fds + 10);
    store_close(s);

    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);
    free(dir);
}
END_TEST

/* What a fill sees of tmp/ while it writes: how many files are there. */
struct counting_fill {
    const float *data;
    const char *tmp;
    int tmp_files;
};

static int fill_counting_tmp(void *ctx, void *dst, uint64_t len, tetris_error *err)
{
    struct counting_fill *f = ctx;
    f->tmp_files = count_files(f->tmp);
    return fill_copy((void *)f->data, dst, len, err);
}

/* Drops CAP_DAC_READ_SEARCH, which linkat(AT_EMPTY_PATH) needs. */
static int drop_dac_read_search(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0)
        return -1;
    d[0].effective &= ~(1u << CAP_DAC_READ_SEARCH);
    d[0].permitted &= ~(1u << CAP_DAC_READ_SEARCH);
    return (int)syscall(SYS_capset, &h, d);
}

/* Hides /proc/self/fd: a tmpfs over /proc in a mount namespace of its own. */
static int hide_proc(void)
{
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return -1;
    return mount("none", "/proc", "tmpfs", 0, NULL);
}

/* One child's publishes, in a store of its own at dir (its first publish
 * probes how to make temp files): three tensors, one over a file in its
 * place that is not that tensor. Exits 0 when each is resident, verifies,
 * is 0444 and linked once, nothing is left in tmp/, and the fills saw
 * want_tmp_files files in tmp/ (0: unnamed temp files, 1: named; -1:
 * either, the same for the three). */
static void publish_in_child(const char *dir, uint64_t capacity, int want_tmp_files)
{
    store *s = NULL;
    tetris_error err;
    struct store_options o = {.create = true, .capacity_bytes = capacity};
    if (store_open(dir, &o, &s, &err) != 0)
        _exit(20);
    char *tmp = sub_path(s, "tmp");
    for (unsigned i = 0; i < 3; i++) {
        struct test_tensor t = make_tensor(100 + i, 70 + i);
        char *path = tensor_path(s, &t.meta.digest);
        if (i == 2) {
            char *fan = strdup(path);
            *strrchr(fan, '/') = '\0';
            mkdir(fan, 0755);
            unit_write_text(path, "not this tensor");
            free(fan);
        }
        struct counting_fill f = {.data = t.data, .tmp = tmp, .tmp_files = -1};
        bool published = false;
        if (store_publish_tensor(s, &t.meta, fill_counting_tmp, &f, &published, &err) != 0 ||
            !published)
            _exit(21);
        if (want_tmp_files < 0 && (f.tmp_files == 0 || f.tmp_files == 1))
            want_tmp_files = f.tmp_files;
        if (f.tmp_files != want_tmp_files)
            _exit(22);
        struct stat st;
        if (stat(path, &st) != 0 || st.st_nlink != 1 || (st.st_mode & 07777) != 0444)
            _exit(23);
        if (store_verify_tensor(s, &t.meta.digest, &err) != 0)
            _exit(24);
        free(path);
        free(t.data);
    }
    if (count_files(tmp) != 0)
        _exit(25);
    free(tmp);
    store_close(s);
    _exit(0);
}

/* A store without a capacity publishes through unnamed temp files
 * (publish.c: store_temp_kind), linked by AT_EMPTY_PATH, or through /proc
 * without CAP_DAC_READ_SEARCH (before Linux 6.10, which lets a process
 * link what it opened), or named when neither works (no /proc either); a
 * store with a capacity names them (its reservations). Each way leaves
 * the same store. */
START_TEST(publish_puts_temp_files_in_place_every_way)
{
    enum { AS_IS, NO_CAPABILITY, NO_PROC, CAPACITY, WAYS };
    for (int way = 0; way < WAYS; way++) {
        if (way == NO_PROC && geteuid() != 0)
            continue; /* a mount namespace needs root here */
        char *dir = new_dir();
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            if ((way == NO_CAPABILITY || way == NO_PROC) && geteuid() == 0 &&
                drop_dac_read_search() < 0)
                _exit(10);
            if (way == NO_PROC && hide_proc() < 0)
                _exit(11);
            publish_in_child(dir, way == CAPACITY ? 1u << 30 : 0,
                             way == CAPACITY  ? 1
                             : way == NO_PROC ? -1
                                              : 0);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "way %d: child status %d", way,
                      status);
        free(dir);
    }
}
END_TEST

START_TEST(publish_map_roundtrip)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(1000, 1);
    tetris_error err;
    ck_assert(!store_has_tensor(s, &t.meta.digest));
    ck_assert(!store_tensor_present(s, &t.meta.digest));
    store_mapping m;
    ck_assert_int_eq(store_map_tensor(s, &t.meta.digest, &m, &err), -TETRIS_E_NOTFOUND);

    publish(s, &t, true);
    ck_assert(store_has_tensor(s, &t.meta.digest));
    ck_assert(store_tensor_present(s, &t.meta.digest));
    publish(s, &t, false); /* already resident: not written again */

    ck_assert_int_eq(store_map_tensor(s, &t.meta.digest, &m, &err), 0);
    ck_assert_uint_eq(m.nbytes, t.meta.nbytes);
    ck_assert_mem_eq(m.data, t.data, t.meta.nbytes);
    ck_assert_str_eq(m.meta.dtype, "float32");
    ck_assert_int_eq(m.meta.ndim, 1);
    ck_assert_int_eq(m.meta.shape[0], 1000);
    ck_assert_uint_eq(m.meta.crc32, t.meta.crc32);
    ck_assert(tensor_digest_equal(&m.meta.digest, &t.meta.digest));

    char *path = tensor_path(s, &t.meta.digest);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0444);

    /* The kernel shows the mapping as read-only and shared. */
    FILE *maps = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(maps);
    char line[4096], perms[8] = "";
    while (fgets(line, sizeof line, maps) != NULL)
        if (strstr(line, path) != NULL)
            sscanf(line, "%*s %7s", perms);
    fclose(maps);
    ck_assert_str_eq(perms, "r--s");

    ck_assert_int_eq(store_verify_tensor(s, &t.meta.digest, &err), 0);
    ck_assert_int_eq(store_check_crc(s, &t.meta.digest, &err), 0);

    char *tmp = sub_path(s, "tmp");
    ck_assert_int_eq(count_files(tmp), 0);
    store_unmap_tensor(&m);
    ck_assert_ptr_null(m.map_base);
    free(tmp);
    free(path);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(publish_empty_and_scalar)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    tetris_error err;
    tensor_meta empty = {.dtype = "int64", .ndim = 2, .shape = {0, 7}, .nbytes = 0};
    ck_assert_int_eq(tensor_digest_compute(&empty, "", &err), 0);
    bool published = false;
    ck_assert_int_eq(store_publish_tensor(s, &empty, fill_copy, "", &published, &err), 0);
    ck_assert(published);
    store_mapping m;
    ck_assert_int_eq(store_map_tensor(s, &empty.digest, &m, &err), 0);
    ck_assert_uint_eq(m.nbytes, 0);
    ck_assert_int_eq(m.meta.shape[1], 7);
    store_unmap_tensor(&m);

    unsigned char one = 1;
    tensor_meta scalar = {.dtype = "bool", .ndim = 0, .nbytes = 1};
    ck_assert_int_eq(tensor_digest_compute(&scalar, &one, &err), 0);
    ck_assert_int_eq(store_publish_tensor(s, &scalar, fill_copy, &one, &published, &err), 0);
    ck_assert_int_eq(store_verify_tensor(s, &scalar.digest, &err), 0);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(chunked_publish_matches_and_verifies)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    /* Several chunks plus a ragged tail: 1,000,003 float32 elements. */
    struct test_tensor t = make_tensor(1000003, 7);
    tetris_error err;
    bool published = true;

    ck_assert_int_eq(
        store_publish_tensor_chunked(s, &t.meta, read_scribble, t.data, &published, &err),
        -TETRIS_E_CORRUPT);
    ck_assert(!published);
    ck_assert(!store_has_tensor(s, &t.meta.digest));
    ck_assert_int_eq(
        store_publish_tensor_chunked(s, &t.meta, read_fail_late, t.data, &published, &err),
        -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "source went away"));
    ck_assert(!store_has_tensor(s, &t.meta.digest));

    ck_assert_int_eq(store_publish_tensor_chunked(s, &t.meta, read_copy, t.data, &published, &err),
                     0);
    ck_assert(published);
    ck_assert_int_eq(store_publish_tensor_chunked(s, &t.meta, read_copy, t.data, &published, &err),
                     0);
    ck_assert(!published); /* one copy */

    store_mapping m;
    ck_assert_int_eq(store_map_tensor(s, &t.meta.digest, &m, &err), 0);
    ck_assert_mem_eq(m.data, t.data, t.meta.nbytes);
    ck_assert_int_eq(store_verify_tensor(s, &t.meta.digest, &err), 0);
    ck_assert_int_eq(store_check_crc(s, &t.meta.digest, &err), 0);
    store_unmap_tensor(&m);

    char *tmp = sub_path(s, "tmp");
    ck_assert_int_eq(count_files(tmp), 0);
    free(tmp);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(computed_publish_names_the_file_by_its_bytes)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(1000003, 9);
    tetris_error err;
    bool published = false;
    /* The caller's claim, if any, is overwritten by what the bytes hash to. */
    tensor_meta meta = t.meta;
    memset(&meta.digest, 0xab, sizeof meta.digest);
    meta.crc32 = 0;
    ck_assert_int_eq(store_publish_tensor_computed(s, &meta, read_fail_late, NULL, t.data, 0,
                                                   &published, &err),
                     -TETRIS_E_IO);
    ck_assert(!published);
    char *tmp = sub_path(s, "tmp");
    ck_assert_int_eq(count_files(tmp), 0);
    ck_assert_int_eq(store_publish_tensor_computed(s, &meta, read_copy, NULL, t.data, 0, &published,
                                                   &err),
                     0);
    ck_assert(published);
    ck_assert(tensor_digest_equal(&meta.digest, &t.meta.digest));
    ck_assert_uint_eq(meta.crc32, t.meta.crc32);
    ck_assert_int_eq(store_verify_tensor(s, &t.meta.digest, &err), 0);
    /* Resident already: the second copy is discarded, the identity still
     * filled; the whole-tensor fill path computes the same. */
    tensor_meta again = t.meta;
    memset(&again.digest, 0, sizeof again.digest);
    ck_assert_int_eq(store_publish_tensor_computed(s, &again, NULL, fill_copy, t.data, 0,
                                                   &published, &err),
                     0);
    ck_assert(!published);
    ck_assert(tensor_digest_equal(&again.digest, &t.meta.digest));
    ck_assert_int_eq(count_files(tmp), 0);
    ck_assert_int_eq(store_publish_tensor_computed(s, &again, read_copy, fill_copy, t.data, 0,
                                                   &published, &err),
                     -TETRIS_E_INVAL);
    /* On 4 KiB pages: a failed read leaves nothing; the flag needs a read
     * source, and an unknown flag is refused; the bytes and identity are
     * the same as written any other way. */
    ck_assert_int_eq(store_publish_tensor_computed(s, &again, NULL, fill_copy, t.data,
                                                   STORE_PUBLISH_SMALL_PAGES, &published, &err),
                     -TETRIS_E_INVAL);
    ck_assert_int_eq(store_publish_tensor_computed(s, &again, read_copy, NULL, t.data, 1u << 7,
                                                   &published, &err),
                     -TETRIS_E_INVAL);
    struct test_tensor u = make_tensor(3 * 1024 * 1024 + 5, 10);
    tensor_meta small = u.meta;
    memset(&small.digest, 0, sizeof small.digest);
    ck_assert_int_eq(store_publish_tensor_computed(s, &small, read_fail_late, NULL, u.data,
                                                   STORE_PUBLISH_SMALL_PAGES, &published, &err),
                     -TETRIS_E_IO);
    ck_assert(!published);
    ck_assert_int_eq(count_files(tmp), 0);
    ck_assert_int_eq(store_publish_tensor_computed(s, &small, read_copy, NULL, u.data,
                                                   STORE_PUBLISH_SMALL_PAGES, &published, &err),
                     0);
    ck_assert(published);
    ck_assert(tensor_digest_equal(&small.digest, &u.meta.digest));
    ck_assert_uint_eq(small.crc32, u.meta.crc32);
    ck_assert_int_eq(store_verify_tensor(s, &u.meta.digest, &err), 0);
    ck_assert_int_eq(count_files(tmp), 0);
    free(u.data);
    free(tmp);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(publish_rejects_wrong_bytes_and_bad_meta)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(4096, 2);
    tetris_error err;
    bool published = true;

    ck_assert_int_eq(store_publish_tensor(s, &t.meta, fill_scribble, t.data, &published, &err),
                     -TETRIS_E_CORRUPT);
    ck_assert(!published);
    ck_assert_ptr_nonnull(strstr(err.msg, "hash to"));
    ck_assert(!store_has_tensor(s, &t.meta.digest));

    ck_assert_int_eq(store_publish_tensor(s, &t.meta, fill_fail, NULL, &published, &err),
                     -TETRIS_E_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "source went away"));

    /* Right digest, wrong crc in meta. */
    tensor_meta wrong_crc = t.meta;
    wrong_crc.crc32 ^= 1;
    ck_assert_int_eq(store_publish_tensor(s, &wrong_crc, fill_copy, t.data, &published, &err),
                     -TETRIS_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "crc32"));

    tensor_meta bad = t.meta;
    bad.nbytes += 4; /* shape says otherwise */
    ck_assert_int_eq(store_publish_tensor(s, &bad, fill_copy, t.data, &published, &err),
                     -TETRIS_E_FORMAT);
    strcpy(bad.dtype, "complex128");
    ck_assert_int_eq(store_publish_tensor(s, &bad, fill_copy, t.data, &published, &err),
                     -TETRIS_E_FORMAT);

    /* Nothing partial is left behind anywhere. */
    char *tmp = sub_path(s, "tmp");
    ck_assert_int_eq(count_files(tmp), 0);
    uint64_t used = 1;
    ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
    ck_assert_uint_eq(used, 0);
    free(tmp);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(write_through_mapping_faults)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(1024, 3);
    publish(s, &t, true);
    store_mapping m;
    tetris_error err;
    ck_assert_int_eq(store_map_tensor(s, &t.meta.digest, &m, &err), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not the sanitizer's report-and-exit */
        *(volatile char *)m.data = 42;
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "child status %#x", status);
    ck_assert_mem_eq(m.data, t.data, t.meta.nbytes);
    store_unmap_tensor(&m);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(remove_and_quarantine_keep_existing_mappings)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor a = make_tensor(512, 4), b = make_tensor(512, 5);
    publish(s, &a, true);
    publish(s, &b, true);
    tetris_error err;
    store_mapping ma, mb;
    ck_assert_int_eq(store_map_tensor(s, &a.meta.digest, &ma, &err), 0);
    ck_assert_int_eq(store_map_tensor(s, &b.meta.digest, &mb, &err), 0);

    ck_assert_int_eq(store_remove_tensor(s, &a.meta.digest, &err), 0);
    ck_assert(!store_has_tensor(s, &a.meta.digest));
    ck_assert_int_eq(store_remove_tensor(s, &a.meta.digest, &err), -TETRIS_E_NOTFOUND);
    ck_assert_mem_eq(ma.data, a.data, a.meta.nbytes);

    ck_assert_int_eq(store_quarantine_tensor(s, &b.meta.digest, &err), 0);
    store_mapping again;
    ck_assert_int_eq(store_map_tensor(s, &b.meta.digest, &again, &err), -TETRIS_E_NOTFOUND);
    ck_assert_mem_eq(mb.data, b.data, b.meta.nbytes);
    char *q = sub_path(s, "quarantine");
    ck_assert_int_eq(count_files(q), 1);
    ck_assert_int_eq(store_quarantine_tensor(s, &b.meta.digest, &err), -TETRIS_E_NOTFOUND);

    /* A quarantined tensor can be ingested again as a fresh copy. */
    publish(s, &b, true);
    ck_assert_int_eq(store_verify_tensor(s, &b.meta.digest, &err), 0);

    store_unmap_tensor(&ma);
    store_unmap_tensor(&mb);
    free(q);
    free(a.data);
    free(b.data);
    store_close(s);
    free(dir);
}
END_TEST

struct listing {
    int n;
    uint64_t bytes;
};

static int count_entry(void *ctx, const struct store_entry *e)
{
    struct listing *l = ctx;
    l->n++;
    l->bytes += e->meta.nbytes;
    ck_assert_uint_eq(e->file_bytes, e->meta.nbytes + 160);
    return 0;
}

START_TEST(foreach_tensor_lists_complete_files)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t[3] = {make_tensor(10, 6), make_tensor(20, 7), make_tensor(30, 8)};
    for (int i = 0; i < 3; i++)
        publish(s, &t[i], true);
    /* A stray file in a fanout directory is not a tensor. */
    char *stray;
    ck_assert_int_ge(asprintf(&stray, "%s/public/tensors/00/junk", dir), 0);
    char *fan;
    ck_assert_int_ge(asprintf(&fan, "%s/public/tensors/00", dir), 0);
    mkdir(fan, 0755);
    unit_write_text(stray, "junk");
    /* So is a FIFO with a digest's name; reading it must not hang. */
    char *fifo;
    ck_assert_int_ge(asprintf(&fifo, "%s/public/tensors/00/00%062d", dir, 0), 0);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);

    struct listing l = {0};
    tetris_error err;
    ck_assert_int_eq(store_foreach_tensor(s, count_entry, &l, &err), 0);
    ck_assert_int_eq(l.n, 3);
    ck_assert_uint_eq(l.bytes, 60 * sizeof(float));

    struct store_repair_report r;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.bad_tensors_removed, 2);
    ck_assert_int_eq(access(stray, F_OK), -1);
    ck_assert_int_eq(access(fifo, F_OK), -1);
    free(fifo);
    for (int i = 0; i < 3; i++)
        free(t[i].data);
    free(fan);
    free(stray);
    store_close(s);
    free(dir);
}
END_TEST

/* ---- corruption ---- */

static void corrupt_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR); /* root ignores the 0444 mode */
    ck_assert_int_ge(fd, 0);
    unsigned char c;
    ck_assert_int_eq(pread(fd, &c, 1, off), 1);
    c ^= 0x01;
    ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

START_TEST(corruption_is_detected_and_repaired)
{
    if (geteuid() != 0)
        return; /* needs to write 0444 files */
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor bytes_bad = make_tensor(256, 9), trailer_bad = make_tensor(256, 10),
                       short_file = make_tensor(256, 11), good = make_tensor(256, 12);
    publish(s, &bytes_bad, true);
    publish(s, &trailer_bad, true);
    publish(s, &short_file, true);
    publish(s, &good, true);
    tetris_error err;

    char *p = tensor_path(s, &bytes_bad.meta.digest);
    corrupt_byte(p, 100);
    /* Mapping checks the trailer only; scrubs re-read the bytes. */
    ck_assert(store_has_tensor(s, &bytes_bad.meta.digest));
    ck_assert_int_eq(store_verify_tensor(s, &bytes_bad.meta.digest, &err), -TETRIS_E_CORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "hash to"));
    ck_assert_int_eq(store_check_crc(s, &bytes_bad.meta.digest, &err), -TETRIS_E_CORRUPT);
    free(p);

    p = tensor_path(s, &trailer_bad.meta.digest);
    corrupt_byte(p, (off_t)trailer_bad.meta.nbytes + 20); /* inside the dtype */
    store_mapping m;
    ck_assert_int_eq(store_map_tensor(s, &trailer_bad.meta.digest, &m, &err), -TETRIS_E_CORRUPT);
    ck_assert(!store_has_tensor(s, &trailer_bad.meta.digest));
    free(p);

    p = tensor_path(s, &short_file.meta.digest);
    ck_assert_int_eq(truncate(p, (off_t)short_file.meta.nbytes), 0);
    ck_assert_int_eq(store_map_tensor(s, &short_file.meta.digest, &m, &err), -TETRIS_E_CORRUPT);
    free(p);

    /* Republishing heals a tensor whose file is unusable. */
    publish(s, &short_file, true);
    ck_assert_int_eq(store_verify_tensor(s, &short_file.meta.digest, &err), 0);

    struct store_repair_report r;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.bad_tensors_removed, 1); /* the bad trailer; bad bytes need a scrub */
    ck_assert(!store_has_tensor(s, &trailer_bad.meta.digest));
    ck_assert_int_eq(store_verify_tensor(s, &good.meta.digest, &err), 0);
    ck_assert_int_eq(store_quarantine_tensor(s, &bytes_bad.meta.digest, &err), 0);
    free(bytes_bad.data);
    free(trailer_bad.data);
    free(short_file.data);
    free(good.data);
    store_close(s);
    free(dir);
}
END_TEST

/* ---- capacity ---- */

START_TEST(capacity_limits_ingest)
{
    char *dir = new_dir();
    /* 1000 floats = 4000 bytes + 160 trailer = 4160 per file, charged as
     * whole pages plus an inode: two fit, not three. */
    uint64_t c = store_charged_bytes(4160);
    ck_assert_uint_eq(c, store_tensor_charge(4000));
    ck_assert_uint_ge(c, 4160 + STORE_INODE_CHARGE);
    uint64_t cap = 2 * c + c / 2;
    store *s = open_store(dir, cap, NULL);
    ck_assert_uint_eq(store_capacity(s), cap);
    struct test_tensor t[3] = {make_tensor(1000, 20), make_tensor(1000, 21), make_tensor(1000, 22)};
    publish(s, &t[0], true);
    publish(s, &t[1], true);
    tetris_error err;
    bool published = true;
    ck_assert_int_eq(store_publish_tensor(s, &t[2].meta, fill_copy, t[2].data, &published, &err),
                     -TETRIS_E_FULL);
    ck_assert(!published);
    char want[128];
    snprintf(want, sizeof want, "store full: need %llu bytes, %llu of %llu used",
             (unsigned long long)c, (unsigned long long)(2 * c), (unsigned long long)cap);
    ck_assert_msg(strstr(err.msg, want) != NULL, "message: %s", err.msg);
    uint64_t used;
    ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
    ck_assert_uint_eq(used, 2 * c);
    /* Re-publishing a resident tensor needs no room. */
    publish(s, &t[0], false);
    store_close(s);

    /* The capacity is persisted; an explicit option overrides it. */
    struct store_options plain = {0};
    ck_assert_int_eq(store_open(dir, &plain, &s, &err), 0);
    ck_assert_uint_eq(store_capacity(s), cap);
    ck_assert_int_eq(store_publish_tensor(s, &t[2].meta, fill_copy, t[2].data, &published, &err),
                     -TETRIS_E_FULL);
    /* Usage follows removals at once (the cache must notice). */
    ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
    ck_assert_int_eq(store_remove_tensor(s, &t[0].meta.digest, &err), 0);
    ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
    ck_assert_uint_eq(used, c);
    publish(s, &t[2], true);
    ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
    ck_assert_uint_eq(used, 2 * c);
    store_close(s);

    struct store_options bigger = {.capacity_bytes = 4 * c};
    ck_assert_int_eq(store_open(dir, &bigger, &s, &err), 0);
    ck_assert_uint_eq(store_capacity(s), 4 * c);
    publish(s, &t[0], true);
    store_close(s);
    for (int i = 0; i < 3; i++)
        free(t[i].data);
    free(dir);
}
END_TEST

/* A filesystem that fills up is TETRIS_E_FULL wherever the publish runs
 * out of room: in the tensor's bytes or in its trailer after them
 * (publish.c: finish_file). In a child with a mount namespace of its own,
 * a 256 KiB tmpfs gets tensors of about what is left (less, exactly,
 * more): each is published or refused as full, never an I/O error, and
 * one exactly as large as what is left has its bytes fit and its trailer
 * not. Exit 0 when so; else the case's number, its message on stderr. */
static void publish_until_full_in_child(const char *dir)
{
    static const long deltas[] = {-4096 - 160, -160, -4, 0, 4, 4096};
    tetris_error err;
    store *s = NULL;
    struct store_options o = {.create = true};
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
        mount("none", dir, "tmpfs", 0, "size=256k,mode=0755") < 0) {
        perror("tmpfs");
        _exit(40);
    }
    if (store_open(dir, &o, &s, &err) != 0) {
        fprintf(stderr, "store_open: %s\n", err.msg);
        _exit(40);
    }
    bool trailer_full = false;
    for (size_t i = 0; i < sizeof deltas / sizeof deltas[0]; i++) {
        struct statvfs v;
        if (statvfs(dir, &v) != 0)
            _exit(41);
        long left = (long)(v.f_bavail * v.f_frsize), bytes = left + deltas[i];
        struct test_tensor t = make_tensor((size_t)bytes / sizeof(float), 90 + (unsigned)i);
        bool published = false;
        int rc = store_publish_tensor_chunked(s, &t.meta, read_copy, t.data, &published, &err);
        if (rc != 0 && rc != -TETRIS_E_FULL) {
            fprintf(stderr, "%ld bytes with %ld left: %s\n", bytes, left, err.msg);
            _exit(50 + (int)i);
        }
        trailer_full |= rc == -TETRIS_E_FULL && strstr(err.msg, "trailer") != NULL;
        if (rc == 0 && store_remove_tensor(s, &t.meta.digest, &err) != 0)
            _exit(42);
        free(t.data);
    }
    store_close(s);
    _exit(trailer_full ? 0 : 43);
}

START_TEST(full_filesystem_is_full)
{
    if (geteuid() != 0)
        return; /* mounting a tmpfs needs root */
    char *dir = new_dir();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        publish_until_full_in_child(dir);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    free(dir);
}
END_TEST

/* An empty tensor is a page and an inode to tmpfs, and is charged so. */
START_TEST(empty_tensors_are_charged_a_page_and_an_inode)
{
    long page = sysconf(_SC_PAGESIZE);
    ck_assert_uint_eq(store_tensor_charge(0), (uint64_t)page + STORE_INODE_CHARGE);
    ck_assert_uint_eq(store_charged_bytes((uint64_t)page), (uint64_t)page + STORE_INODE_CHARGE);
    ck_assert_uint_eq(store_charged_bytes((uint64_t)page + 1),
                      2 * (uint64_t)page + STORE_INODE_CHARGE);
    ck_assert_uint_eq(store_charged_bytes(UINT64_MAX - 1), UINT64_MAX);
    char *dir = new_dir();
    uint64_t c = store_tensor_charge(0);
    store *s = open_store(dir, 3 * c, NULL);
    tetris_error err;
    int published = 0;
    for (int i = 1; i <= 5; i++) {
        tensor_meta m = {.dtype = "float32", .ndim = 2, .shape = {0, i}};
        ck_assert_int_eq(tensor_digest_compute(&m, "", &err), 0);
        bool made = false;
        int rc = store_publish_tensor(s, &m, fill_copy, "", &made, &err);
        ck_assert_msg(rc == 0 || rc == -TETRIS_E_FULL, "%s", err.msg);
        published += made;
    }
    ck_assert_int_eq(published, 3);
    uint64_t used;
    ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
    ck_assert_uint_eq(used, 3 * c);
    store_close(s);
    free(dir);
}
END_TEST

/* Usage is cached per fanout directory; back-to-back changes inside one
 * directory (same clock tick) must all show up. */
START_TEST(usage_tracks_changes_within_one_directory)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    enum { SAME = 6 };
    struct test_tensor t[SAME];
    int found = 0;
    t[found++] = make_tensor(4, 1000);
    for (unsigned seed = 1001; found < SAME; seed++) {
        struct test_tensor c = make_tensor(4, seed);
        if (c.meta.digest.bytes[0] == t[0].meta.digest.bytes[0])
            t[found++] = c;
        else
            free(c.data);
    }
    tetris_error err;
    uint64_t used, want = 0;
    for (int i = 0; i < SAME; i++) {
        /* Let a clock tick pass so the scan below may be cached, then
         * change the directory right after it. */
        usleep(20000);
        ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
        ck_assert_uint_eq(used, want);
        publish(s, &t[i], true);
        want += store_tensor_charge(t[i].meta.nbytes);
        ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
        ck_assert_uint_eq(used, want);
    }
    for (int i = 0; i < SAME; i++) {
        usleep(20000);
        ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
        ck_assert_int_eq(store_remove_tensor(s, &t[i].meta.digest, &err), 0);
        want -= store_tensor_charge(t[i].meta.nbytes);
        ck_assert_int_eq(store_usage_bytes(s, &used, &err), 0);
        ck_assert_uint_eq(used, want);
        free(t[i].data);
    }
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(capacity_counts_live_reservations_only)
{
    char *dir = new_dir();
    store *s = open_store(dir, 10000, NULL);
    tetris_error err;
    /* A live writer's 6000-byte temp file counts (charged as pages and an
     * inode); a dead one's does not. */
    char *live, *dead;
    ck_assert_int_ge(asprintf(&live, "%s/private/tmp/live", dir), 0);
    ck_assert_int_ge(asprintf(&dead, "%s/private/tmp/dead", dir), 0);
    int lfd = open(live, O_RDWR | O_CREAT, 0644);
    ck_assert_int_ge(lfd, 0);
    ck_assert_int_eq(flock(lfd, LOCK_EX), 0);
    ck_assert_int_eq(ftruncate(lfd, 6000), 0);
    int dfd = open(dead, O_RDWR | O_CREAT, 0644);
    ck_assert_int_eq(ftruncate(dfd, 6000), 0);
    close(dfd);

    struct test_tensor t = make_tensor(1000, 30);
    bool published;
    ck_assert_int_eq(store_publish_tensor(s, &t.meta, fill_copy, t.data, &published, &err),
                     -TETRIS_E_FULL);
    char want[64];
    snprintf(want, sizeof want, "%llu of 10000 used",
             (unsigned long long)store_charged_bytes(6000));
    ck_assert_msg(strstr(err.msg, want) != NULL, "message: %s", err.msg);

    /* Something that is not a temp file does not stop repair. */
    char *subdir;
    ck_assert_int_ge(asprintf(&subdir, "%s/private/tmp/not-a-file", dir), 0);
    ck_assert_int_eq(mkdir(subdir, 0755), 0);

    struct store_repair_report r;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.temp_files_removed, 1);
    ck_assert_int_eq(access(live, F_OK), 0);
    ck_assert_int_eq(access(subdir, F_OK), 0);
    free(subdir);
    ck_assert_int_eq(access(dead, F_OK), -1);

    close(lfd); /* the writer dies */
    publish(s, &t, true);
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.temp_files_removed, 1);
    ck_assert_int_eq(access(live, F_OK), -1);
    free(t.data);
    free(live);
    free(dead);
    store_close(s);
    free(dir);
}
END_TEST

/* ---- tenants ---- */

START_TEST(tenants_are_isolated)
{
    char *dir = new_dir();
    store *shared = open_store(dir, 0, NULL);
    store *a = open_store(dir, 0, "team-a");
    store *b = open_store(dir, 0, "team_b.v2");
    char *want;
    ck_assert_int_ge(asprintf(&want, "%s/tenants/team-a", dir), 0);
    ck_assert_str_eq(store_root(a), want);

    struct test_tensor t = make_tensor(300, 40);
    publish(a, &t, true);
    ck_assert(store_has_tensor(a, &t.meta.digest));
    ck_assert(!store_has_tensor(b, &t.meta.digest));
    ck_assert(!store_has_tensor(shared, &t.meta.digest));
    struct listing l = {0};
    tetris_error err;
    ck_assert_int_eq(store_foreach_tensor(shared, count_entry, &l, &err), 0);
    ck_assert_int_eq(l.n, 0);
    /* The same tensor in another tenant is a separate copy. */
    publish(b, &t, true);

    const char *bad[] = {"", "..", ".", "a/b", "../x", "A", "x..y", "tenant name", "é",
                         "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct store_options o = {.create = true, .tenant = bad[i]};
        store *x = NULL;
        ck_assert_msg(store_open(dir, &o, &x, &err) == -TETRIS_E_INVAL, "tenant '%s'", bad[i]);
    }
    free(want);
    free(t.data);
    store_close(shared);
    store_close(a);
    store_close(b);
    free(dir);
}
END_TEST

/* ---- read-only opens ---- */

START_TEST(read_only_store_maps_but_refuses_writes)
{
    char *dir = new_dir();
    store *w = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(2048, 50), other = make_tensor(64, 51);
    publish(w, &t, true);
    store_close(w);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* As an unprivileged user the directory is really unwritable. */
        if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
            _exit(10);
        tetris_error err;
        store *s = NULL;
        struct store_options ro = {.read_only = true};
        if (store_open(dir, &ro, &s, &err) != 0)
            _exit(11);
        store_mapping m;
        if (!store_has_tensor(s, &t.meta.digest) || store_map_tensor(s, &t.meta.digest, &m, &err) != 0)
            _exit(12);
        if (memcmp(m.data, t.data, t.meta.nbytes) != 0)
            _exit(13);
        if (store_verify_tensor(s, &t.meta.digest, &err) != 0)
            _exit(14);
        bool published;
        if (store_publish_tensor(s, &other.meta, fill_copy, other.data, &published, &err) !=
                -TETRIS_E_DENIED ||
            strstr(err.msg, "read-only") == NULL)
            _exit(15);
        store_holder *h;
        if (store_holder_open(s, "x", getpid(), &h, &err) != -TETRIS_E_DENIED ||
            strstr(err.msg, "read-only") == NULL)
            _exit(16);
        if (store_use_begin(s, &err) != 0)
            _exit(17);
        store_use_end(s);
        struct store_repair_report r;
        if (store_repair(s, &r, &err) != -TETRIS_E_DENIED ||
            store_remove_tensor(s, &t.meta.digest, &err) != -TETRIS_E_DENIED)
            _exit(18);
        store_unmap_tensor(&m);
        store_close(s);

        /* Opened for writing by a user who does not own it: refused at
         * the door, with the reason. */
        struct store_options rw = {0};
        if (geteuid() != 0) {
            if (store_open(dir, &rw, &s, &err) != -TETRIS_E_DENIED ||
                strstr(err.msg, "belongs to uid") == NULL)
                _exit(19);
        }
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    free(t.data);
    free(other.data);
    free(dir);
}
END_TEST

/* ---- holders ---- */

struct holders_seen {
    int n, alive, dead;
    size_t refs, garbage;
    char label[256];
    pid_t pid;
    uint64_t first_bytes;
    tensor_digest first;
};

static int see_holder(void *ctx, const struct store_holder_info *h)
{
    struct holders_seen *seen = ctx;
    seen->n++;
    if (h->alive)
        seen->alive++;
    else
        seen->dead++;
    seen->refs += h->n_refs;
    seen->garbage += h->n_garbage;
    snprintf(seen->label, sizeof seen->label, "%s", h->label);
    seen->pid = h->pid;
    if (h->n_refs > 0) {
        seen->first = h->refs[0];
        seen->first_bytes = h->ref_bytes[0];
    }
    return 0;
}

static struct holders_seen scan_holders(store *s)
{
    struct holders_seen seen;
    memset(&seen, 0, sizeof seen);
    tetris_error err;
    int rc = store_foreach_holder(s, see_holder, &seen, &err);
    ck_assert_msg(rc == 0, "foreach_holder: %s", err.msg);
    return seen;
}

START_TEST(holder_records_references)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t[3] = {make_tensor(8, 60), make_tensor(9, 61), make_tensor(10, 62)};
    tetris_error err;
    store_holder *h = NULL;
    ck_assert_int_eq(store_holder_open(s, "resnet\nfake line", 4242, &h, &err), 0);
    ck_assert_ptr_nonnull(strstr(store_holder_id(h), "4242-"));
    ck_assert_int_eq(store_holder_add(h, &t[0].meta.digest, t[0].meta.nbytes, &err), 0);
    tensor_digest ds[2] = {t[1].meta.digest, t[2].meta.digest};
    uint64_t bytes[2] = {t[1].meta.nbytes, t[2].meta.nbytes};
    ck_assert_int_eq(store_holder_add_many(h, ds, bytes, 2, &err), 0);

    /* Our own holder reads as alive: the probe uses its own description. */
    struct holders_seen seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 1);
    ck_assert_int_eq(seen.alive, 1);
    ck_assert_uint_eq(seen.refs, 3);
    ck_assert_uint_eq(seen.garbage, 0);
    ck_assert_str_eq(seen.label, "resnet_fake line");
    ck_assert_int_eq(seen.pid, 4242);
    ck_assert(tensor_digest_equal(&seen.first, &t[0].meta.digest));
    ck_assert_uint_eq(seen.first_bytes, 32);

    /* A live holder survives repair. */
    struct store_repair_report r;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.dead_holders_released, 0);
    ck_assert_int_eq(scan_holders(s).alive, 1);

    store_holder_close(h);
    ck_assert_int_eq(scan_holders(s).n, 0);
    char *hd = sub_path(s, "holders");
    ck_assert_int_eq(count_files(hd), 0);
    free(hd);
    for (int i = 0; i < 3; i++)
        free(t[i].data);
    store_close(s);
    free(dir);
}
END_TEST

START_TEST(killed_holder_is_found_dead_and_released)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(100, 70);
    publish(s, &t, true);
    tetris_error err;
    store_holder *mine = NULL;
    ck_assert_int_eq(store_holder_open(s, "parent", getpid(), &mine, &err), 0);

    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        store *cs = NULL;
        store_holder *h = NULL;
        struct store_options o = {0};
        store_mapping m;
        if (store_open(dir, &o, &cs, &err) != 0 || store_use_begin(cs, &err) != 0 ||
            store_holder_open(cs, "child", getpid(), &h, &err) != 0 ||
            store_holder_add(h, &t.meta.digest, t.meta.nbytes, &err) != 0 ||
            store_map_tensor(cs, &t.meta.digest, &m, &err) != 0)
            _exit(1);
        store_use_end(cs);
        if (write(ready[1], "x", 1) != 1)
            _exit(2);
        for (;;)
            pause();
    }
    close(ready[1]);
    char c;
    ck_assert_int_eq(read(ready[0], &c, 1), 1);
    close(ready[0]);

    struct holders_seen seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 2);
    ck_assert_int_eq(seen.alive, 2);

    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);

    seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 2);
    ck_assert_int_eq(seen.alive, 1);
    ck_assert_int_eq(seen.dead, 1);

    struct store_repair_report r;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.dead_holders_released, 1);
    seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 1);
    ck_assert_int_eq(seen.alive, 1);
    ck_assert_str_eq(seen.label, "parent");
    store_holder_close(mine);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

/* A kept holder (a CSI volume's) is alive without any process: repair
 * leaves it and its references counted until it is released; its name
 * is checked, and a second one of the same name is a conflict. */
START_TEST(kept_holder_survives_repair_until_released)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(100, 72);
    publish(s, &t, true);
    tetris_error err;
    uint64_t nbytes = t.meta.nbytes;
    ck_assert_int_eq(store_kept_exists(s, "csi-vol1", &err), 0);
    ck_assert_int_eq(store_kept_hold(s, "csi-vol1", "model.onnx", &t.meta.digest, &nbytes, 1, &err),
                     0);
    ck_assert_int_eq(store_kept_exists(s, "csi-vol1", &err), 1);
    ck_assert_int_eq(store_kept_hold(s, "csi-vol1", "again", &t.meta.digest, &nbytes, 1, &err),
                     -TETRIS_E_CONFLICT);
    ck_assert_int_eq(store_kept_hold(s, "../x", "bad", &t.meta.digest, &nbytes, 1, &err),
                     -TETRIS_E_INVAL);
    ck_assert_int_eq(store_kept_hold(s, ".hidden", "bad", &t.meta.digest, &nbytes, 1, &err),
                     -TETRIS_E_INVAL);

    struct store_repair_report r;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.dead_holders_released, 0);
    struct holders_seen seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 1);
    ck_assert_int_eq(seen.alive, 1);
    ck_assert_uint_eq(seen.refs, 1);
    ck_assert_int_eq(seen.pid, 0);
    ck_assert_str_eq(seen.label, "model.onnx");
    ck_assert(tensor_digest_equal(&seen.first, &t.meta.digest));
    ck_assert(seen.first_bytes == nbytes);

    ck_assert_int_eq(store_kept_release(s, "csi-vol1", &err), 0);
    ck_assert_int_eq(store_kept_release(s, "csi-vol1", &err), 0);
    seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 0);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

/* The light repair releases a killed holder and a dead writer's temp file,
 * keeps a live holder and a live writer's temp file, and leaves tensors/
 * alone (an inconsistent file there waits for the full repair). */
START_TEST(light_repair_skips_the_tensor_walk)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(100, 71);
    publish(s, &t, true);
    tetris_error err;
    store_holder *mine = NULL;
    ck_assert_int_eq(store_holder_open(s, "live", getpid(), &mine, &err), 0);

    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        store *cs = NULL;
        store_holder *h = NULL;
        struct store_options o = {0};
        if (store_open(dir, &o, &cs, &err) != 0 ||
            store_holder_open(cs, "killed", getpid(), &h, &err) != 0 ||
            store_holder_add(h, &t.meta.digest, t.meta.nbytes, &err) != 0)
            _exit(1);
        raise(SIGKILL);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));

    /* A crashed ingest's temp file (nobody holds its lock) and a live one. */
    char *dead_tmp = sub_path(s, "tmp/crashed-ingest");
    FILE *f = fopen(dead_tmp, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    char *live_tmp = sub_path(s, "tmp/live-ingest");
    int live_fd = open(live_tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ck_assert_int_ge(live_fd, 0);
    ck_assert_int_eq(flock(live_fd, LOCK_EX), 0);
    /* Not a tensor: only the full repair's walk of tensors/ removes it. */
    char *stray = sub_path(s, "tensors/00/not-a-tensor");
    char *fan = sub_path(s, "tensors/00");
    ck_assert(mkdir(fan, 0755) == 0 || errno == EEXIST);
    free(fan);
    f = fopen(stray, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);

    struct store_repair_report r;
    ck_assert_int_eq(store_repair_light(s, &r, &err), 0);
    ck_assert_uint_eq(r.dead_holders_released, 1);
    ck_assert_uint_eq(r.temp_files_removed, 1);
    ck_assert_uint_eq(r.bad_tensors_removed, 0);
    ck_assert_int_eq(access(dead_tmp, F_OK), -1);
    ck_assert_int_eq(access(live_tmp, F_OK), 0);
    ck_assert_int_eq(access(stray, F_OK), 0);
    struct holders_seen seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 1);
    ck_assert_str_eq(seen.label, "live");
    ck_assert(store_has_tensor(s, &t.meta.digest));

    ck_assert_int_eq(store_repair_light(s, &r, &err), 0); /* nothing left to do */
    ck_assert_uint_eq(r.dead_holders_released + r.temp_files_removed, 0);
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    ck_assert_uint_eq(r.bad_tensors_removed, 1);
    ck_assert_int_eq(access(stray, F_OK), -1);
    ck_assert(store_has_tensor(s, &t.meta.digest));

    close(live_fd);
    store_holder_close(mine);
    free(dead_tmp);
    free(live_tmp);
    free(stray);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

/* Each mapping counts against vm.max_map_count: the budget shrinks by one
 * per mapped tensor, and mapping past the limit fails with an error that
 * names the limit rather than a bare "Cannot allocate memory". */
START_TEST(mapping_limit_is_named)
{
    uint64_t limit = 0;
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%" SCNu64, &limit), 1);
    fclose(f);
    if (limit > 1000000)
        return; /* raised far enough that hitting it would take minutes */
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor t = make_tensor(16, 72);
    publish(s, &t, true);
    tetris_error err;
    size_t cap = (size_t)limit + 64, n = 0;
    store_mapping *maps = calloc(cap, sizeof *maps); /* itself a mapping: before the count */
    ck_assert_ptr_nonnull(maps);
    uint64_t before, after;
    ck_assert_int_eq(store_map_budget(&before, &err), 0);
    ck_assert_uint_gt(before, 0);
    ck_assert_uint_lt(before, limit);

    int rc = 0;
    while (n < cap && (rc = store_map_tensor(s, &t.meta.digest, &maps[n], &err)) == 0) {
        n++;
        if (n == 1) {
            ck_assert_int_eq(store_map_budget(&after, &err), 0);
            ck_assert_uint_eq(after, before - 1);
        }
    }
    ck_assert_int_eq(rc, -TETRIS_E_NOMEM);
    ck_assert_ptr_nonnull(strstr(err.msg, "vm.max_map_count"));
    /* The budget was what could be mapped, give or take the margin. */
    ck_assert_uint_ge(n, before);
    ck_assert_uint_le(n, before + 64);
    ck_assert_int_eq(store_map_budget(&after, &err), 0);
    ck_assert_uint_eq(after, 0);
    for (size_t i = 0; i < n; i++)
        store_unmap_tensor(&maps[i]);
    free(maps);
    store_mapping again;
    ck_assert_int_eq(store_map_tensor(s, &t.meta.digest, &again, &err), 0); /* room again */
    store_unmap_tensor(&again);
    free(t.data);
    store_close(s);
    free(dir);
}
END_TEST

/* Whether the mapping at addr is marked MADV_NOHUGEPAGE ("nh" in its
 * VmFlags). */
static bool mapping_no_huge(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    bool in = false, nh = false;
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long start, end;
        if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)addr >= start && (uintptr_t)addr < end;
        else if (in && strncmp(line, "VmFlags:", 8) == 0)
            nh = strstr(line, " nh") != NULL;
    }
    fclose(f);
    return nh;
}

/* store_keep_small_pages marks exactly the mappings of its file, however
 * many, and leaves the others; a file not mapped is none; a missing one
 * is named. */
START_TEST(small_pages_are_kept_for_every_mapping)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    struct test_tensor a = make_tensor(4096, 81), b = make_tensor(4096, 82);
    publish(s, &a, true);
    publish(s, &b, true);
    tetris_error err = {0};
    store_mapping ma1, ma2, mb;
    ck_assert_int_eq(store_map_tensor(s, &a.meta.digest, &ma1, &err), 0);
    ck_assert_int_eq(store_map_tensor(s, &a.meta.digest, &ma2, &err), 0);
    ck_assert_int_eq(store_map_tensor(s, &b.meta.digest, &mb, &err), 0);
    char *path_a = tensor_path(s, &a.meta.digest);
    size_t marked = 99;
    ck_assert_int_eq(store_keep_small_pages(path_a, &marked, &err), 0);
    ck_assert_uint_eq(marked, 2);
    ck_assert(mapping_no_huge(ma1.map_base));
    ck_assert(mapping_no_huge(ma2.map_base));
    ck_assert(!mapping_no_huge(mb.map_base));
    store_unmap_tensor(&ma1);
    store_unmap_tensor(&ma2);
    ck_assert_int_eq(store_keep_small_pages(path_a, &marked, &err), 0);
    ck_assert_uint_eq(marked, 0);
    char *missing = sub_path(s, "tensors/no-such-file");
    ck_assert_int_eq(store_keep_small_pages(missing, &marked, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, "no-such-file"));
    store_unmap_tensor(&mb);
    free(missing);
    free(path_a);
    free(a.data);
    free(b.data);
    store_close(s);
    free(dir);
}
END_TEST

/* In a child, as it keeps the setting: WAY is what the child starts
 * with (0: huge pages on; 1: off for every mapping), then
 * store_keep_small_pages_inherited; exits 0 when what follows holds. */
static int keep_small_pages_inherited_in_child(int way)
{
    if (way == 1 && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0)
        return 10;
    tetris_error err = {0};
    bool kept = false;
    if (store_keep_small_pages_inherited(&kept, &err) != 0)
        return 11;
    int now = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
    if (!kept) /* a kernel without the mode: nothing changed */
        return way == 0 && now == 0 ? 0 : 12;
    /* 3: off except where asked for (PR_THP_DISABLE_EXCEPT_ADVISED is
     * 1 << 1); wholly off stays wholly off (1). */
    if (now != (way == 0 ? 3 : 1))
        return 13;
    if (store_keep_small_pages_inherited(&kept, &err) != 0 || !kept ||
        prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) != now)
        return 14;
    pid_t pid = fork(); /* what the process starts has it too */
    if (pid == 0)
        _exit(prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0) == now ? 0 : 1);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        return 15;
    return 0;
}

/* store_keep_small_pages_inherited turns huge pages off for unadvised
 * mappings, in this process and those it starts, and never loosens a
 * process that has them off altogether; calling it again changes nothing. */
START_TEST(small_pages_are_kept_for_started_programs)
{
    for (int way = 0; way < 2; way++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
            _exit(keep_small_pages_inherited_in_child(way));
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "way %d: child status %d", way,
                      status);
    }
}
END_TEST

START_TEST(garbage_holder_files_are_parsed_defensively)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    char *path;
    ck_assert_int_ge(asprintf(&path, "%s/private/holders/999-junk.ref", dir), 0);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("tetris-holder 1\npid 999\nlabel junk\n", f);
    fputs("530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0 8\n", f); /* good */
    fputs("530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0 -8\n", f);
    fputs("530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956 8\n", f);
    fputs("530bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0 99999999999999999999999\n", f);
    fputs("zz0bf3b50eab5d304d865052a7fc80c19034c5d7561a0f30c2de7b45c60956b0 8\n", f);
    fputs("pid banana\n\n", f);
    fwrite("\x00\x01\xff\n", 1, 4, f);
    for (int i = 0; i < 10000; i++)
        fputc('x', f);
    fputc('\n', f);
    fputs("07de19ac9ca841fb9e4ca2fc7a65441710337078713cc11dd7893a396409140e 4", f); /* torn */
    fclose(f);
    /* Temp holder files of a dead creator are repair's too. */
    char *temp;
    ck_assert_int_ge(asprintf(&temp, "%s/private/holders/.new-1.0000000000000000", dir), 0);
    f = fopen(temp, "w");
    fclose(f);

    /* A FIFO posing as a holder must not hang the scan. */
    char *fifo;
    ck_assert_int_ge(asprintf(&fifo, "%s/private/holders/fifo.ref", dir), 0);
    ck_assert_int_eq(mkfifo(fifo, 0644), 0);

    struct holders_seen seen = scan_holders(s);
    ck_assert_int_eq(seen.n, 1);
    ck_assert_int_eq(seen.dead, 1);
    ck_assert_uint_eq(seen.refs, 1);
    ck_assert_uint_eq(seen.garbage, 9);
    ck_assert_int_eq(seen.pid, 999);

    struct store_repair_report r;
    tetris_error err;
    ck_assert_int_eq(store_repair(s, &r, &err), 0);
    /* The dead holder, and the FIFO: nobody's holder, removed as it is. */
    ck_assert_uint_eq(r.dead_holders_released, 2);
    ck_assert_uint_eq(r.temp_files_removed, 1);
    ck_assert_int_eq(access(path, F_OK), -1);
    ck_assert_int_eq(access(temp, F_OK), -1);
    ck_assert_int_eq(access(fifo, F_OK), -1);
    free(fifo);
    free(temp);
    free(path);
    store_close(s);
    free(dir);
}
END_TEST

static int stop_early(void *ctx, const struct store_holder_info *h)
{
    (void)h;
    (*(int *)ctx)++;
    return 7;
}

START_TEST(foreach_holder_stops_when_asked)
{
    char *dir = new_dir();
    store *s = open_store(dir, 0, NULL);
    tetris_error err;
    store_holder *h1, *h2;
    ck_assert_int_eq(store_holder_open(s, "a", 1, &h1, &err), 0);
    ck_assert_int_eq(store_holder_open(s, "b", 2, &h2, &err), 0);
    int calls = 0;
    ck_assert_int_eq(store_foreach_holder(s, stop_early, &calls, &err), 7);
    ck_assert_int_eq(calls, 1);
    store_holder_close(h1);
    store_holder_close(h2);
    store_close(s);
    free(dir);
}
END_TEST

/* ---- use lock ---- */

static int try_lock(const char *dir, int op)
{
    char *p;
    ck_assert_int_ge(asprintf(&p, "%s/private/use.lock", dir), 0);
    int fd = open(p, O_RDONLY);
    free(p);
    ck_assert_int_ge(fd, 0);
    int rc = flock(fd, op | LOCK_NB);
    close(fd);
    return rc;
}

START_TEST(use_lock_excludes_reclaim)
{
    char *dir = new_dir();
    store *loader = open_store(dir, 0, NULL);
    store *reclaimer = open_store(dir, 0, NULL);
    tetris_error err;

    ck_assert_int_eq(store_use_begin(loader, &err), 0);
    ck_assert_int_eq(store_use_begin(loader, &err), 0); /* nests */
    ck_assert_int_eq(try_lock(dir, LOCK_EX), -1);
    ck_assert_int_eq(try_lock(dir, LOCK_SH), 0); /* other loaders share */
    ck_assert_int_eq(store_reclaim_begin(loader, &err), -TETRIS_E_INVAL);
    store_use_end(loader);
    ck_assert_int_eq(try_lock(dir, LOCK_EX), -1);
    store_use_end(loader);
    ck_assert_int_eq(try_lock(dir, LOCK_EX), 0);

    ck_assert_int_eq(store_reclaim_begin(reclaimer, &err), 0);
    ck_assert_int_eq(try_lock(dir, LOCK_SH), -1);
    ck_assert_int_eq(store_use_begin(reclaimer, &err), -TETRIS_E_INVAL);
    store_reclaim_end(reclaimer);
    ck_assert_int_eq(try_lock(dir, LOCK_SH), 0);
    store_close(loader);
    store_close(reclaimer);
    free(dir);
}
END_TEST

static void unit_tests(Suite *s)
{
    base_dir = unit_scratch_dir("test-store");
    /* The read-only test drops to another user. */
    if (chmod(base_dir, 0755) != 0) {
        perror(base_dir);
        exit(EXIT_FAILURE);
    }
    TCase *tc = unit_tcase(s, "core", 60);
    tcase_add_test(tc, open_creates_layout_and_reopens);
    tcase_add_test(tc, open_rejects_missing_and_foreign);
    tcase_add_test(tc, publish_map_roundtrip);
    tcase_add_test(tc, presence_is_a_regular_file_not_a_link);
    tcase_add_test(tc, publish_keeps_fanout_directories_and_refuses_links);
    tcase_add_test(tc, prepare_publish_makes_stripes_and_fanouts);
    tcase_add_test(tc, kept_fanout_descriptors_stay_within_budget);
    tcase_add_test(tc, publish_puts_temp_files_in_place_every_way);
    tcase_add_test(tc, publish_empty_and_scalar);
    tcase_add_test(tc, publish_rejects_wrong_bytes_and_bad_meta);
    tcase_add_test(tc, chunked_publish_matches_and_verifies);
    tcase_add_test(tc, full_filesystem_is_full);
    tcase_add_test(tc, computed_publish_names_the_file_by_its_bytes);
    tcase_add_test(tc, write_through_mapping_faults);
    tcase_add_test(tc, remove_and_quarantine_keep_existing_mappings);
    tcase_add_test(tc, foreach_tensor_lists_complete_files);
    tcase_add_test(tc, corruption_is_detected_and_repaired);
    tcase_add_test(tc, capacity_limits_ingest);
    tcase_add_test(tc, empty_tensors_are_charged_a_page_and_an_inode);
    tcase_add_test(tc, usage_tracks_changes_within_one_directory);
    tcase_add_test(tc, capacity_counts_live_reservations_only);
    tcase_add_test(tc, tenants_are_isolated);
    tcase_add_test(tc, read_only_store_maps_but_refuses_writes);
    tcase_add_test(tc, holder_records_references);
    tcase_add_test(tc, killed_holder_is_found_dead_and_released);
    tcase_add_test(tc, kept_holder_survives_repair_until_released);
    tcase_add_test(tc, light_repair_skips_the_tensor_walk);
    tcase_add_test(tc, mapping_limit_is_named);
    tcase_add_test(tc, small_pages_are_kept_for_every_mapping);
    tcase_add_test(tc, small_pages_are_kept_for_started_programs);
    tcase_add_test(tc, garbage_holder_files_are_parsed_defensively);
    tcase_add_test(tc, foreach_holder_stops_when_asked);
    tcase_add_test(tc, use_lock_excludes_reclaim);
}

UNIT_MAIN("store")
