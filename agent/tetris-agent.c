/* tetris-agent - the agent's command line: index a model (manifest), load
 * it through the node's tensor store, verify a store, and inspect models
 * and stores. */
#include <getopt.h>
#include <malloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agent/agent.h"
#include "tensorstore/gpu/gpu.h"
#include "agent/hold.h"
#include "agent/supervise.h"
#include "agent/view.h"
#include "common/cli.h"
#include "common/log.h"
#include "model/manifest.h"
#include "protocol/names.h"

enum exit_code {
    EXIT_OK = 0,
    EXIT_FAIL = 1,      /* verify found corrupt tensors; an operation failed */
    EXIT_USAGE = 2,
    EXIT_BAD_INPUT = 3, /* a model or manifest that is unreadable or malformed */
    EXIT_NO_STORE = 4,  /* the store given does not exist or is not a store */
};

static const char usage_text[] =
    "usage: tetris-agent COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  index MODEL [-o MANIFEST]\n"
    "        parse MODEL (ONNX or safetensors), hash every tensor and write its\n"
    "        manifest as JSON to MANIFEST (default: stdout)\n"
    "  load [--store DIR] [--tenant T] [--manifest M] [--direct | --private]\n"
    "       [--socket PATH] [--timeout-ms N] [--label L] [--workers N]\n"
    "       [--digests auto|agent|daemon] [--populate none|map|madvise] [--hold]\n"
    "       [--device cuda:N] [--libcuda PATH] MODEL\n"
    "        map MODEL's tensors from the store (default " STORE_DEFAULT_DIR "); the\n"
    "        node daemon ingests missing ones (--direct: ingest them ourselves;\n"
    "        --private: no store, the baseline). Prints one JSON object as soon as\n"
    "        the model is loaded: tensors, bytes, mapped_bytes, ingested_bytes,\n"
    "        private_bytes, load_ms, fell_back, fallback_reason. --hold keeps it\n"
    "        loaded until stdin closes or SIGTERM. --workers N: threads that\n"
    "        hash (no manifest) and publish (--direct); default: the CPUs this\n"
    "        process may use (affinity, cgroup cpu.max). --digests: without a\n"
    "        manifest, who hashes the model (daemon: it hashes while it ingests;\n"
    "        agent: we hash first; auto, the default: one probe tensor decides,\n"
    "        resident -> agent, missing -> daemon). --populate: how the store's\n"
    "        mappings get their page tables (default madvise: at load, so the\n"
    "        first request pays no page faults; none: on first touch).\n"
    "        --device cuda:N (default $TETRIS_DEVICE): also map the node daemon's\n"
    "        shared read-only GPU copies of the tensors (store mode only; see\n"
    "        docs/GPU.md); adds device, device_tensors, device_bytes and\n"
    "        device_fallback to the JSON. --libcuda: the CUDA driver (default\n"
    "        $TETRIS_LIBCUDA, else libcuda.so.1).\n"
    "  view [LOAD OPTIONS] MODEL DIR [--hold]\n"
    "        write MODEL's model view into DIR (new, or empty and ours): a\n"
    "        directory any runtime opens instead of MODEL to compute on the\n"
    "        store's pages (docs/PROTOCOLS.md, \"Model view\"). Prints one JSON\n"
    "        object: view, model, mode, shared, fallback, tensors, shared_tensors,\n"
    "        bytes, shared_bytes, load_ms. --hold keeps the references until stdin\n"
    "        closes or SIGTERM, then removes the view; without it the view stays\n"
    "        and nothing holds its tensors (the daemon may reclaim them).\n"
    "  exec [LOAD OPTIONS] [--model MODEL] [--view-dir DIR] -- CMD [ARGS...]\n"
    "        write the model view, run CMD with " TETRIS_ENV_MODEL_VIEW "=<view dir> in its\n"
    "        environment, hold the references while it runs, then remove the view\n"
    "        and exit with CMD's status (128+N if signal N killed it). MODEL,\n"
    "        --store, --tenant and --manifest default to\n"
    "        $" TETRIS_ENV_MODEL ", $" TETRIS_ENV_STORE ", $" TETRIS_ENV_TENANT "\n"
    "        and $" TETRIS_ENV_MANIFEST "; DIR to a new directory in ${TMPDIR:-/tmp}.\n"
    "        SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to\n"
    "        CMD; CMD is killed if we die; as PID 1 we also reap orphans. No\n"
    "        store, a full store or no daemon is no error: the view then names the\n"
    "        original model (\"fallback\").\n"
    "        LOAD OPTIONS (view, exec): --store, --tenant, --manifest, --direct,\n"
    "        --private, --socket, --timeout-ms, --label, --workers, --digests, as\n"
    "        for load; the references are held without page tables or copies.\n"
    "  check-view [DIR]\n"
    "        check a model view (default $" TETRIS_ENV_MODEL_VIEW ") the way its reader must\n"
    "        before trusting it: owners and modes, the index, every file in the\n"
    "        store or the model's folder and long enough; prints a JSON summary\n"
    "  verify [--store DIR] [--tenant T]\n"
    "        re-hash every stored tensor; list the ones that do not match\n"
    "  inspect MODEL | inspect [--store DIR] [--tenant T]\n"
    "        a model's tensors, or a store's tensors and holders, for humans\n"
    "\n"
    "  -h, --help     this text         --version   the version\n"
    "\n"
    "Logs go to stderr as key=value lines (TETRIS_LOG_LEVEL=debug for more).\n"
    "Exit status: 0 ok; 1 failure (verify found corrupt tensors, a load failed, a\n"
    "view cannot be written: a --view-dir or DIR that is not empty or not ours);\n"
    "2 usage; 3 bad model or manifest (check-view: a view not to trust); 4 no\n"
    "usable store at DIR. exec, once CMD started: CMD's status; 126 CMD cannot\n"
    "be run, 127 CMD not found.\n";

struct cli {
    const char *store_dir;
    const char *tenant;
    const char *manifest;
    const char *output;
    const char *socket;
    const char *label;
    const char *device;
    const char *libcuda;
    int timeout_ms;
    int workers;
    enum agent_digests digests;
    enum store_populate populate;
    enum agent_mode mode;
    bool mode_given;
    bool hold;
    bool store_given;
    const char *model;    /* --model */
    const char *view_dir; /* --view-dir */
    const char *arg;      /* the first positional argument, if any */
    const char *arg2;     /* the second (view: DIR) */
};

static const char *const mode_names[] = {"store", "direct", "private"};

static int usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "tetris-agent: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\nTry 'tetris-agent --help'.\n");
    return EXIT_USAGE;
}

static int exit_code_for(int r)
{
    switch (-r) {
    case TETRIS_E_FORMAT:
    case TETRIS_E_IO:
    case TETRIS_E_NOTFOUND: return EXIT_BAD_INPUT;
    case TETRIS_E_INVAL: return EXIT_USAGE;
    default: return EXIT_FAIL;
    }
}

static int report(int r, const char *what, const tetris_error *err)
{
    char q[600];
    log_error("event=error op=%s code=%s msg=%s", what, tetris_code_name(r),
              log_quote(err->msg, q, sizeof(q)));
    return exit_code_for(r);
}

/* Parses the options common to every command; `allowed` lists the long
 * option names the command accepts. Returns EXIT_OK or EXIT_USAGE. */
static int parse_cli(int argc, char **argv, const char *cmd, const char *const *allowed,
                     int max_args, struct cli *c)
{
    static const struct option longopts[] = {{"store", required_argument, NULL, 's'},
                                             {"tenant", required_argument, NULL, 't'},
                                             {"manifest", required_argument, NULL, 'm'},
                                             {"output", required_argument, NULL, 'o'},
                                             {"direct", no_argument, NULL, 'D'},
                                             {"private", no_argument, NULL, 'P'},
                                             {"socket", required_argument, NULL, 'S'},
                                             {"timeout-ms", required_argument, NULL, 'T'},
                                             {"label", required_argument, NULL, 'l'},
                                             {"hold", no_argument, NULL, 'H'},
                                             {"workers", required_argument, NULL, 'W'},
                                             {"digests", required_argument, NULL, 'd'},
                                             {"populate", required_argument, NULL, 'p'},
                                             {"device", required_argument, NULL, 'G'},
                                             {"libcuda", required_argument, NULL, 'L'},
                                             {"model", required_argument, NULL, 'M'},
                                             {"view-dir", required_argument, NULL, 'v'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int c_, idx;

    memset(c, 0, sizeof(*c));
    c->store_dir = STORE_DEFAULT_DIR;
    c->mode = AGENT_MODE_STORE;
    c->populate = AGENT_POPULATE_DEFAULT;
    optind = 1;
    while ((c_ = getopt_long(argc, argv, "ho:", longopts, &idx)) != -1) {
        const char *name = NULL;
        if (c_ == 'h') {
            fputs(usage_text, stdout);
            exit(EXIT_OK);
        }
        for (size_t i = 0; longopts[i].name != NULL; i++)
            if (longopts[i].val == c_)
                name = longopts[i].name;
        if (c_ == '?' || name == NULL)
            return usage_error("bad option for '%s'", cmd);
        bool ok = false;
        for (size_t i = 0; allowed[i] != NULL; i++)
            ok = ok || strcmp(allowed[i], name) == 0;
        if (!ok) {
            fprintf(stderr, "tetris-agent: %s does not take --%s\n", cmd, name);
            return usage_error("see the usage of '%s'", cmd);
        }
        switch (c_) {
        case 's':
            c->store_dir = optarg;
            c->store_given = true;
            break;
        case 'M': c->model = optarg; break;
        case 'v': c->view_dir = optarg; break;
        case 't': c->tenant = optarg; break;
        case 'm': c->manifest = optarg; break;
        case 'o': c->output = optarg; break;
        case 'S': c->socket = optarg; break;
        case 'l': c->label = optarg; break;
        case 'G': c->device = optarg; break;
        case 'L': c->libcuda = optarg; break;
        case 'H': c->hold = true; break;
        case 'p': {
            tetris_error err = {0};
            if (agent_populate_parse(optarg, &c->populate, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        }
        case 'd':
            if (strcmp(optarg, "auto") == 0)
                c->digests = AGENT_DIGESTS_AUTO;
            else if (strcmp(optarg, "agent") == 0)
                c->digests = AGENT_DIGESTS_AGENT;
            else if (strcmp(optarg, "daemon") == 0)
                c->digests = AGENT_DIGESTS_DAEMON;
            else
                return usage_error("--digests: want auto, agent or daemon, not '%s'", optarg);
            break;
        case 'W': {
            tetris_error err = {0};
            if (cli_parse_int("--workers", optarg, 1, 4096, &c->workers, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        }
        case 'T': {
            tetris_error err = {0};
            if (cli_parse_int("--timeout-ms", optarg, 1, 86400000, &c->timeout_ms, &err) < 0)
                return usage_error("%s", err.msg);
            break;
        }
        case 'D':
        case 'P':
            if (c->mode_given)
                return usage_error("%s: --direct and --private exclude each other", cmd);
            c->mode = c_ == 'D' ? AGENT_MODE_DIRECT : AGENT_MODE_PRIVATE;
            c->mode_given = true;
            break;
        }
    }
    if (optind < argc && max_args >= 1)
        c->arg = argv[optind++];
    if (optind < argc && max_args >= 2)
        c->arg2 = argv[optind++];
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    return EXIT_OK;
}

/* ---- index ---- */

static int cmd_index(int argc, char **argv)
{
    static const char *const allowed[] = {"output", NULL};
    tetris_error err = {0};
    struct cli c;
    model *m = NULL;
    int r;

    if ((r = parse_cli(argc, argv, "index", allowed, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL)
        return usage_error("%s: expected a MODEL", "index");
    r = model_parse_file(c.arg, &m, &err);
    if (r == 0)
        r = model_sources_realpath(m, &err);
    if (r == 0)
        r = model_compute_digests(m, &err);
    if (r == 0)
        r = manifest_write_file(m, c.output != NULL ? c.output : "-", &err);
    if (r == 0)
        log_info("event=index model=%s tensors=%zu bytes=%" PRIu64 " manifest=%s", c.arg,
                 m->n_tensors, m->total_bytes, c.output != NULL ? c.output : "-");
    model_free(m);
    return r < 0 ? report(r, "index", &err) : EXIT_OK;
}

/* ---- load ---- */

/* Prints j (NULL: it could not be built) as one compact JSON line on
 * stdout and drops the reference: the summary line of a command. */
static int print_json_line(json_t *j)
{
    char *text = j != NULL ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL)
        return -1;
    printf("%s\n", text);
    free(text);
    return fflush(stdout) == 0 ? 0 : -1;
}

static int print_load(const agent_model *am, const char *mode, const char *device)
{
    const struct agent_stats *s = &am->stats;
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:b, s:s}", "model",
                          am->model->path, "mode", mode, "tensors", (json_int_t)s->tensors,
                          "bytes", (json_int_t)s->bytes, "mapped_bytes",
                          (json_int_t)s->mapped_bytes, "ingested_bytes",
                          (json_int_t)s->ingested_bytes, "private_bytes",
                          (json_int_t)s->private_bytes, "load_ms", s->load_ms, "fell_back",
                          s->fell_back, "fallback_reason", s->fallback_reason);
    if (j != NULL && device != NULL &&
        json_object_update_new(j, json_pack("{s:s, s:I, s:I, s:s}", "device", device,
                                            "device_tensors", (json_int_t)s->device_tensors,
                                            "device_bytes", (json_int_t)s->device_bytes,
                                            "device_fallback", s->device_fallback)) < 0) {
        json_decref(j);
        j = NULL;
    }
    return print_json_line(j);
}

/* The agent's options from the load options of a command line. */
static void load_options(const struct cli *c, struct agent_options *o)
{
    agent_options_init(o);
    o->mode = c->mode;
    o->store_dir = c->store_dir;
    o->tenant = c->tenant;
    o->manifest_path = c->manifest;
    o->daemon_socket = c->socket;
    o->label = c->label;
    o->workers = (unsigned)c->workers;
    o->digests = c->digests;
    o->populate = c->populate;
    if (c->timeout_ms > 0)
        o->daemon_timeout_ms = c->timeout_ms;
}

static int cmd_load(int argc, char **argv)
{
    static const char *const allowed[] = {"store",   "tenant",     "manifest", "direct",  "private",
                                          "socket",  "timeout-ms", "label",    "hold",    "workers",
                                          "digests", "populate",   "device",   "libcuda", NULL};
    struct agent_options o;
    tetris_error err = {0};
    agent_model *am = NULL;
    struct cli c;
    int r;

    if ((r = parse_cli(argc, argv, "load", allowed, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL)
        return usage_error("%s: expected a MODEL", "load");
    load_options(&c, &o);
    o.device = c.device != NULL ? c.device : getenv("TETRIS_DEVICE");
    if (o.device != NULL && o.device[0] == '\0')
        o.device = NULL;
    o.libcuda = c.libcuda;
    if (o.device != NULL) {
        int ordinal;
        if (gpu_device_parse(o.device, &ordinal, &err) < 0)
            return usage_error("--device: %s", err.msg);
        if (c.mode != AGENT_MODE_STORE)
            return usage_error("%s", "--device needs the node daemon (not --direct or --private)");
    }
    if ((r = agent_load(c.arg, &o, &am, &err)) < 0)
        return report(r, "load", &err);
    if (print_load(am, mode_names[c.mode], o.device) < 0) {
        log_error("event=error op=load msg=\"cannot write the result to stdout\"");
        agent_model_free(am);
        return EXIT_FAIL;
    }
    if (c.hold) {
        int sig = hold_until_released();
        log_info("event=release model=%s by=%s", c.arg, sig ? "signal" : "stdin-closed");
    }
    agent_model_free(am);
    return EXIT_OK;
}

/* ---- view and exec ---- */

/* Loads MODEL only to hold its references (the view's readers map the
 * pages themselves): no page tables, no private copies, so holding costs
 * this process next to no memory. */
static int load_for_view(const struct cli *c, const char *model_path, agent_model **am)
{
    struct agent_options o;
    tetris_error err = {0};
    int r;

    load_options(c, &o);
    o.populate = STORE_POPULATE_NONE;
    o.map_only = true;
    if ((r = agent_load(model_path, &o, am, &err)) < 0)
        return report(r, "load", &err);
    return EXIT_OK;
}

static int write_view(const agent_model *am, const char *model_path, const char *dir,
                      model_view **v)
{
    tetris_error err = {0};
    int r = view_write(am, model_path, dir, v, &err);
    if (r < 0) {
        log_error("event=error op=view code=%s msg=%s", tetris_code_name(r), LOG_Q(err.msg));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

static int print_view(const model_view *v, const agent_model *am, const struct cli *c)
{
    const struct view_stats *s = view_stats(v);
    json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:o, s:I, s:I, s:I, s:I, s:f}", "view", view_dir(v),
                          "model", am->model->path, "mode", mode_names[c->mode], "shared",
                          s->shared, "fallback",
                          s->fallback != NULL ? json_string(s->fallback) : json_null(), "tensors",
                          (json_int_t)s->tensors, "shared_tensors", (json_int_t)s->shared_tensors,
                          "bytes", (json_int_t)s->bytes, "shared_bytes",
                          (json_int_t)s->shared_bytes, "load_ms", am->stats.load_ms);
    return print_json_line(j);
}

static const char *const view_load_options[] = {"store",    "tenant",  "manifest",   "direct",
                                                "private",  "socket",  "timeout-ms", "label",
                                                "workers",  "digests", "hold",       "model",
                                                "view-dir", NULL};

static int cmd_view(int argc, char **argv)
{
    agent_model *am = NULL;
    model_view *v = NULL;
    struct cli c;
    int r;

    if ((r = parse_cli(argc, argv, "view", view_load_options, 2, &c)) != EXIT_OK)
        return r;
    if (c.view_dir != NULL || c.model != NULL)
        return usage_error("%s",
                           "view: MODEL and DIR are arguments (--model and --view-dir are exec's)");
    if (c.arg == NULL || c.arg2 == NULL)
        return usage_error("%s: expected MODEL and DIR", "view");
    /* Blocked before any thread starts, so that every thread leaves them
     * to hold_until_released. */
    if (c.hold)
        hold_block_signals();
    if ((r = load_for_view(&c, c.arg, &am)) != EXIT_OK)
        return r;
    if ((r = write_view(am, c.arg, c.arg2, &v)) != EXIT_OK) {
        agent_model_free(am);
        return r;
    }
    if (print_view(v, am, &c) < 0) {
        log_error("event=error op=view msg=\"cannot write the result to stdout\"");
        r = EXIT_FAIL;
    } else if (c.hold) {
        int sig = hold_until_released();
        log_info("event=release view=%s by=%s", LOG_Q(view_dir(v)),
                 sig ? "signal" : "stdin-closed");
        view_remove(v);
    } else {
        /* The view stays for the caller; nothing holds its tensors now. */
        view_forget(v);
    }
    agent_model_free(am);
    return r;
}

static int cmd_exec(int argc, char **argv)
{
    static const char *const allowed[] = {"store",  "tenant",     "manifest", "direct",  "private",
                                          "socket", "timeout-ms", "label",    "workers", "digests",
                                          "model",  "view-dir",   NULL};
    struct agent_env env;
    agent_model *am = NULL;
    model_view *v = NULL;
    tetris_error err = {0};
    struct cli c;
    int dashes = 1, r;

    while (dashes < argc && strcmp(argv[dashes], "--") != 0)
        dashes++;
    if ((r = parse_cli(dashes, argv, "exec", allowed, 0, &c)) != EXIT_OK)
        return r;
    if (dashes + 1 >= argc)
        return usage_error("%s: expected -- CMD [ARGS...]", "exec");
    agent_env_read(&env);
    if (c.model == NULL)
        c.model = env.model;
    if (!c.store_given && env.store_dir != NULL)
        c.store_dir = env.store_dir;
    if (c.tenant == NULL)
        c.tenant = env.tenant;
    if (c.manifest == NULL)
        c.manifest = env.manifest;
    if (c.model == NULL)
        return usage_error("%s", "exec: no model: set " TETRIS_ENV_MODEL " or --model");
    /* Before the load starts threads: see supervise_block_signals. */
    supervise_block_signals();
    if ((r = load_for_view(&c, c.model, &am)) != EXIT_OK)
        return r;
    if ((r = write_view(am, c.model, c.view_dir, &v)) != EXIT_OK) {
        agent_model_free(am);
        return r;
    }
    /* What the load and the rewrite freed goes back to the kernel: exec
     * stays resident for as long as CMD runs. */
    malloc_trim(0);
    int sig = supervise_take_termination();
    if (sig != 0) {
        log_info("event=exec-cancelled view=%s sig=%d", LOG_Q(view_dir(v)), sig);
        r = SUPERVISE_EXIT_SIGNAL_BASE + sig;
    } else if (setenv(TETRIS_ENV_MODEL_VIEW, view_dir(v), 1) < 0) {
        log_error("event=error op=exec msg=\"cannot set " TETRIS_ENV_MODEL_VIEW "\"");
        r = EXIT_FAIL;
    } else if ((r = supervise_run(argv + dashes + 1, &err)) < 0) {
        log_error("event=error op=exec code=%s msg=%s", tetris_code_name(r), LOG_Q(err.msg));
        r = EXIT_FAIL;
    } else {
        log_info("event=exec-exit cmd=%s status=%d view=%s", LOG_Q(argv[dashes + 1]), r,
                 LOG_Q(view_dir(v)));
    }
    /* The view goes first: no reader must find it once its references are. */
    view_remove(v);
    agent_model_free(am);
    return r;
}

static int cmd_check_view(int argc, char **argv)
{
    static const char *const allowed[] = {NULL};
    struct view_check_result res;
    tetris_error err = {0};
    struct cli c;
    int r;

    if ((r = parse_cli(argc, argv, "check-view", allowed, 1, &c)) != EXIT_OK)
        return r;
    const char *dir = c.arg != NULL ? c.arg : getenv(TETRIS_ENV_MODEL_VIEW);
    if (dir == NULL || dir[0] == '\0')
        return usage_error("%s", "check-view: no DIR and no " TETRIS_ENV_MODEL_VIEW);
    if ((r = view_check(dir, &res, &err)) < 0) {
        log_error("event=view-invalid view=%s code=%s msg=%s", LOG_Q(dir), tetris_code_name(r),
                  LOG_Q(err.msg));
        return EXIT_BAD_INPUT;
    }
    json_t *j = json_pack("{s:s, s:b, s:o, s:I, s:I, s:I}", "view", dir, "shared", res.shared,
                          "fallback", res.fallback[0] ? json_string(res.fallback) : json_null(),
                          "tensors", (json_int_t)res.tensors, "files", (json_int_t)res.files,
                          "shared_files", (json_int_t)res.shared_files);
    return print_json_line(j) == 0 ? EXIT_OK : EXIT_FAIL;
}

/* ---- verify ---- */

struct digest_list {
    tensor_digest *d;
    size_t n, cap;
};

static int collect_digest(void *ctx, const struct store_entry *e)
{
    struct digest_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        tensor_digest *d = realloc(l->d, cap * sizeof(*d));
        if (d == NULL)
            return -1;
        l->d = d;
        l->cap = cap;
    }
    l->d[l->n++] = e->meta.digest;
    return 0;
}

static int open_store(const struct cli *c, store **s, tetris_error *err)
{
    struct store_options so = {.tenant = c->tenant, .read_only = true};
    int r = store_open(c->store_dir, &so, s, err);
    if (r < 0)
        log_error("event=error op=open-store store=%s code=%s msg=%s", LOG_Q(c->store_dir),
                  tetris_code_name(r), LOG_Q(err->msg));
    return r;
}

static int cmd_verify(int argc, char **argv)
{
    static const char *const allowed[] = {"store", "tenant", NULL};
    struct digest_list l = {0};
    tetris_error err = {0};
    size_t bad = 0, failed = 0;
    store *s = NULL;
    struct cli c;
    int r;

    if ((r = parse_cli(argc, argv, "verify", allowed, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg != NULL)
        return usage_error("verify: unexpected argument '%s'", c.arg);
    if (open_store(&c, &s, &err) < 0)
        return EXIT_NO_STORE;
    r = store_foreach_tensor(s, collect_digest, &l, &err);
    if (r < 0) {
        free(l.d);
        store_close(s);
        return report(r, "verify", &err);
    }
    for (size_t i = 0; i < l.n; i++) {
        char hex[TENSOR_DIGEST_HEX_LEN + 1], q[600];
        tensor_digest_to_hex(&l.d[i], hex);
        r = store_verify_tensor(s, &l.d[i], &err);
        if (r == -TETRIS_E_CORRUPT) {
            bad++;
            printf("corrupt sha256:%s\n", hex);
            log_error("event=corrupt digest=sha256:%s msg=%s", hex,
                      log_quote(err.msg, q, sizeof(q)));
        } else if (r == -TETRIS_E_NOTFOUND) {
            continue; /* reclaimed since the listing */
        } else if (r < 0) {
            failed++;
            printf("unverified sha256:%s\n", hex);
            log_error("event=verify-failed digest=sha256:%s code=%s msg=%s", hex,
                      tetris_code_name(r), log_quote(err.msg, q, sizeof(q)));
        }
    }
    printf("verified %zu tensors in %s: %zu corrupt, %zu unreadable\n", l.n, store_root(s), bad,
           failed);
    log_info("event=verify store=%s tensors=%zu corrupt=%zu unreadable=%zu", store_root(s), l.n,
             bad, failed);
    free(l.d);
    store_close(s);
    return bad > 0 || failed > 0 ? EXIT_FAIL : EXIT_OK;
}

/* ---- inspect ---- */

static void format_shape(const tensor_meta *meta, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < meta->ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i > 0 ? "," : "",
                                 meta->shape[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

struct store_totals {
    size_t tensors;
    uint64_t bytes;
    size_t holders, live_holders;
    uint64_t referenced_bytes; /* what live holders map, counted per holder */
};

static int print_tensor(void *ctx, const struct store_entry *e)
{
    struct store_totals *t = ctx;
    char hex[TENSOR_DIGEST_HEX_LEN + 1], shape[160];
    tensor_digest_to_hex(&e->meta.digest, hex);
    format_shape(&e->meta, shape, sizeof(shape));
    printf("  sha256:%.16s  %-10s %-22s %12" PRIu64 "\n", hex, e->meta.dtype, shape,
           e->meta.nbytes);
    t->tensors++;
    t->bytes += e->meta.nbytes;
    return 0;
}

static int print_holder(void *ctx, const struct store_holder_info *h)
{
    struct store_totals *t = ctx;
    uint64_t bytes = 0;
    for (size_t i = 0; i < h->n_refs; i++)
        bytes += h->ref_bytes[i];
    printf("  %-24s pid %-8d %-5s %6zu refs %12" PRIu64 " bytes  %s\n", h->id, (int)h->pid,
           h->alive ? "live" : "dead", h->n_refs, bytes, h->label ? h->label : "");
    t->holders++;
    if (h->alive) {
        t->live_holders++;
        t->referenced_bytes += bytes;
    }
    return 0;
}

static int inspect_store(const struct cli *c)
{
    struct store_totals t = {0};
    tetris_error err = {0};
    store *s = NULL;
    int r;

    if (open_store(c, &s, &err) < 0)
        return EXIT_NO_STORE;
    printf("store: %s\ncapacity: %" PRIu64 " bytes%s\n\ntensors:\n", store_root(s),
           store_capacity(s), store_capacity(s) == 0 ? " (unlimited)" : "");
    r = store_foreach_tensor(s, print_tensor, &t, &err);
    if (r == 0) {
        printf("\nholders:\n");
        r = store_foreach_holder(s, print_holder, &t, &err);
    }
    if (r == 0)
        printf("\n%zu tensors, %" PRIu64 " bytes resident; %zu holders (%zu live) map %" PRIu64
               " bytes: %" PRIu64 " bytes saved by sharing\n",
               t.tensors, t.bytes, t.holders, t.live_holders, t.referenced_bytes,
               t.referenced_bytes > t.bytes ? t.referenced_bytes - t.bytes : 0);
    store_close(s);
    return r < 0 ? report(r, "inspect", &err) : EXIT_OK;
}

static int cmd_inspect(int argc, char **argv)
{
    static const char *const allowed[] = {"store", "tenant", NULL};
    tetris_error err = {0};
    model *m = NULL;
    struct cli c;
    int r;

    if ((r = parse_cli(argc, argv, "inspect", allowed, 1, &c)) != EXIT_OK)
        return r;
    if (c.arg == NULL)
        return inspect_store(&c);
    r = model_parse_file(c.arg, &m, &err);
    if (r == 0)
        r = model_sources_realpath(m, &err);
    if (r == 0)
        r = model_compute_digests(m, &err);
    if (r == 0)
        r = model_print(m, stdout, &err);
    model_free(m);
    return r < 0 ? report(r, "inspect", &err) : EXIT_OK;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } commands[] = {{"index", cmd_index},
                    {"load", cmd_load},
                    {"view", cmd_view},
                    {"exec", cmd_exec},
                    {"check-view", cmd_check_view},
                    {"verify", cmd_verify},
                    {"inspect", cmd_inspect}};

    log_init(argv[0]);
    if (argc < 2)
        return usage_error("%s", "expected a COMMAND");
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage_text, stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("tetris-agent %s\n", TETRIS_VERSION);
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    return usage_error("unknown command '%s'", argv[1]);
}
