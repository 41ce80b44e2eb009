/* config.c - tetris-reclaimer's settings: defaults < YAML file < flags. */
#include "reclaimer/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/cli.h"
#include "common/config_yaml.h"
#include "common/options.h"
#include "protocol/inventory.h"
#include "protocol/names.h"
#include "tensorstore/gpu/gpu.h"
#include "tensorstore/store.h"

/* A tenant name as store_open accepts it. */
static bool tenant_name_valid(const char *t)
{
    size_t len = strlen(t);
    return len > 0 && len < sizeof(((struct reclaimer_tenant_uids *)0)->tenant) &&
           strspn(t, "abcdefghijklmnopqrstuvwxyz0123456789._-") == len && t[0] != '.' &&
           strstr(t, "..") == NULL;
}

/* "T=UID[-UID],...": replaces the bindings (a later flag or file line
 * overrides an earlier one, as every other setting does). */
static int parse_tenant_uids(struct reclaimer_config *cfg, const char *v, tetris_error *err)
{
    cfg->n_tenant_uids = 0;
    const char *p = v;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char item[160];
        if (len >= sizeof(item))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "tenant binding too long: %.40s", p);
        memcpy(item, p, len);
        item[len] = '\0';
        p += len + (p[len] == ',');
        if (len == 0)
            continue;
        char *eq = strchr(item, '=');
        if (eq == NULL)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "\"%s\": want TENANT=UID[-UID]", item);
        *eq = '\0';
        if (!tenant_name_valid(item))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "\"%s\" is no tenant name ([a-z0-9._-])",
                               item);
        char *dash = strchr(eq + 1, '-');
        if (dash != NULL)
            *dash = '\0';
        uint64_t lo, hi;
        if (cli_parse_u64(NULL, eq + 1, 0, UINT32_MAX - 1, &lo, err) < 0 ||
            cli_parse_u64(NULL, dash != NULL ? dash + 1 : eq + 1, lo, UINT32_MAX - 1, &hi, err) < 0)
            return tetris_wrap(err, "uids of tenant %s", item);
        if (cfg->n_tenant_uids == RECLAIMER_TENANT_UIDS_MAX)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "at most %d tenant bindings",
                               RECLAIMER_TENANT_UIDS_MAX);
        struct reclaimer_tenant_uids *b = &cfg->tenant_uids[cfg->n_tenant_uids++];
        memcpy(b->tenant, item, strlen(item) + 1); /* valid names fit */
        b->lo = (uint32_t)lo;
        b->hi = (uint32_t)hi;
    }
    return 0;
}

/* "T,...": replaces the list, as a later setting replaces an earlier one;
 * a name twice counts once. */
static int parse_tenants(struct reclaimer_config *cfg, const char *v, tetris_error *err)
{
    memset(cfg->tenants, 0, sizeof(cfg->tenants));
    cfg->n_tenants = 0;
    for (const char *p = v; *p != '\0';) {
        size_t len = strcspn(p, ",");
        char name[sizeof(cfg->tenants[0])];
        if (len >= sizeof(name))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "tenant name too long: %.40s", p);
        memcpy(name, p, len);
        name[len] = '\0';
        p += len + (p[len] == ',');
        if (len == 0)
            continue;
        if (!tenant_name_valid(name))
            return tetris_fail(err, TETRIS_E_INVAL, 0, "\"%s\" is no tenant name ([a-z0-9._-])",
                               name);
        bool seen = false;
        for (size_t i = 0; i < cfg->n_tenants && !seen; i++)
            seen = strcmp(cfg->tenants[i], name) == 0;
        if (seen)
            continue;
        if (cfg->n_tenants == RECLAIMER_TENANTS_MAX)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "at most %d tenants", RECLAIMER_TENANTS_MAX);
        memcpy(cfg->tenants[cfg->n_tenants++], name, len + 1);
    }
    return 0;
}

/* "[http://|https://]HOST:PORT,...": replaces the list; the port is
 * required (a registry is an address, not a name with a default), a host
 * is lowercased, an entry twice counts once (plain if either said so
 * http://, the operator's word for a registry without TLS). */
static int parse_registries(struct reclaimer_registries *r, const char *v, tetris_error *err)
{
    memset(r, 0, sizeof(*r));
    for (const char *p = v; *p != '\0';) {
        size_t len = strcspn(p, ", ");
        const char *entry = p;
        p += len;
        p += strspn(p, ", ");
        if (len == 0)
            continue;
        bool plain = len > 7 && strncasecmp(entry, "http://", 7) == 0;
        size_t scheme = plain ? 7 : len > 8 && strncasecmp(entry, "https://", 8) == 0 ? 8 : 0;
        entry += scheme;
        len -= scheme;
        char host[OCI_HOST_MAX + 1];
        unsigned port = 0;
        if (oci_authority_parse(entry, len, host, &port, err) < 0)
            return -err->code;
        if (port == 0)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "registry '%.*s' has no port (HOST:PORT)",
                               (int)(len > 255 ? 255 : len), entry);
        for (char *c = host; *c != '\0'; c++)
            *c = (char)tolower((unsigned char)*c);
        char norm[RECLAIMER_REGISTRY_LEN + 16];
        snprintf(norm, sizeof(norm), "%s:%u", host, port); /* port <= 65535: it fits */
        bool seen = false;
        for (size_t i = 0; i < r->n && !seen; i++)
            if ((seen = strcmp(r->entries[i], norm) == 0))
                r->plain[i] |= plain;
        if (seen)
            continue;
        if (r->n == RECLAIMER_REGISTRIES_MAX)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "at most %d registries",
                               RECLAIMER_REGISTRIES_MAX);
        size_t norm_len = strlen(norm);
        if (norm_len >= RECLAIMER_REGISTRY_LEN)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "registry '%s' too long", norm);
        r->plain[r->n] = plain;
        memcpy(r->entries[r->n++], norm, norm_len + 1);
    }
    return 0;
}

bool reclaimer_peer_allowed(const struct reclaimer_config *cfg, const char *tenant, uid_t uid)
{
    bool bound = false, tenant_bound = false;
    for (size_t i = 0; i < cfg->n_tenant_uids; i++) {
        const struct reclaimer_tenant_uids *b = &cfg->tenant_uids[i];
        bool mine = strcmp(b->tenant, tenant) == 0;
        tenant_bound |= mine;
        if (uid >= b->lo && uid <= b->hi) {
            if (mine)
                return true;
            bound = true;
        }
    }
    return !bound && !tenant_bound;
}

/* ---- the settings' parsers: each message starts with its label, the flag
 * ("--interval") or the file's line and key ("r.yaml:3: interval") ---- */

/* A string into a char array of spec->umax bytes. */
static int parse_text(const struct opt_spec *spec, const char *label, const char *value,
                      tetris_error *err)
{
    if (strlen(value) >= spec->umax)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: too long", label);
    strcpy(spec->dest, value);
    return 0;
}

/* An unsigned count in [umin, umax]. */
static int parse_unsigned(const struct opt_spec *spec, const char *label, const char *value,
                          tetris_error *err)
{
    uint64_t v;
    int rc = cli_parse_u64(label, value, spec->umin, spec->umax, &v, err);
    if (rc == 0)
        *(unsigned *)spec->dest = (unsigned)v;
    return rc;
}

/* A duration the daemon waits or loops on: 0 (or near) would spin. */
static int parse_period(const struct opt_spec *spec, const char *label, const char *value,
                        tetris_error *err)
{
    double *out = spec->dest;
    if (config_parse_seconds(value, out, err) < 0)
        return tetris_wrap(err, "%s", label);
    if (*out < 0.01)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: %s is too short", label, value);
    return 0;
}

/* Where a BYTES|P% setting goes: bytes, or a share resolved later. */
struct share_dest {
    uint64_t *bytes;
    double *percent;
    bool *set; /* NULL, or: it was given */
};

/* BYTES, or P% (0 < P <= 100) of something resolved later. */
static int parse_share(const struct opt_spec *spec, const char *label, const char *value,
                       tetris_error *err)
{
    const struct share_dest *d = spec->dest;
    size_t n = strlen(value);
    *d->bytes = 0;
    *d->percent = 0;
    if (d->set != NULL)
        *d->set = true;
    if (n == 0 || value[n - 1] != '%') {
        if (config_parse_bytes(value, d->bytes, err) < 0)
            return tetris_wrap(err, "%s", label);
        return 0;
    }
    char *end;
    double p = strtod(value, &end);
    if (end != value + n - 1 || !(p > 0 && p <= 100))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: %s: want BYTES or a percentage in (0, 100]",
                           label, value);
    *d->percent = p;
    return 0;
}

static int parse_tenant_uids_opt(const struct opt_spec *spec, const char *label, const char *value,
                                 tetris_error *err)
{
    if (parse_tenant_uids(spec->dest, value, err) < 0)
        return tetris_wrap(err, "%s", label);
    return 0;
}

static int parse_tenants_opt(const struct opt_spec *spec, const char *label, const char *value,
                             tetris_error *err)
{
    if (parse_tenants(spec->dest, value, err) < 0)
        return tetris_wrap(err, "%s", label);
    return 0;
}

static int parse_registries_opt(const struct opt_spec *spec, const char *label, const char *value,
                                tetris_error *err)
{
    if (parse_registries(spec->dest, value, err) < 0)
        return tetris_wrap(err, "%s", label);
    return 0;
}

static int parse_store_tmpfs(const struct opt_spec *spec, const char *label, const char *value,
                             tetris_error *err)
{
    if (store_tmpfs_parse_mode(value, spec->dest, err) < 0)
        return tetris_wrap(err, "%s", label);
    return 0;
}

/* ---- the table ---- */

static const char about[] =
    "The tetris node daemon: ingests tensors into the node's store for function\n"
    "instances (Unix socket <store>/public/ingest.sock), frees tensors no live holder\n"
    "references (keep-alive, then LRU above capacity), repairs after crashes,\n"
    "scrubs CRC32s, and serves /metrics, " INVENTORY_PATH " and /healthz over HTTP.\n"
    "It serves every tenant store under <store>/tenants/ the same way (socket\n"
    "<store>/tenants/NAME/public/ingest.sock) for the tenants --tenants names.\n"
    "Every option with a value may also be set in the --config file, by its name\n"
    "with '-' or '_' (keep_alive: 5m); flags override the file.\n";

static const char epilogue[] =
    "Signals: SIGHUP reloads the config file; SIGTERM/SIGINT stop cleanly.\n"
    "Exit status: 0 stopped cleanly (or --once done), 1 runtime failure\n"
    "(store, socket or HTTP address unusable), 2 usage or config error, 3 the\n"
    "store is not this daemon's to serve, nothing was changed: another live daemon\n"
    "serves it, or it is refused (a link, not this user's, writable by others, or\n"
    "the old layout).\n";

#define TEXT_OPTION(name_, field_, meta_, help_)                                                   \
    {                                                                                              \
        .name = (name_), .type = OPT_TYPE_CUSTOM, .dest = cfg->field_, .parse = parse_text,        \
        .umax = sizeof(cfg->field_), .meta = (meta_), .help = (help_)                              \
    }
#define PERIOD_OPTION(name_, field_, help_)                                                        \
    {                                                                                              \
        .name = (name_), .type = OPT_TYPE_CUSTOM, .dest = &cfg->field_, .parse = parse_period,     \
        .meta = "SECONDS", .help = (help_)                                                         \
    }
#define COUNT_OPTION(name_, field_, min_, max_, help_)                                             \
    {                                                                                              \
        .name = (name_), .type = OPT_TYPE_CUSTOM, .dest = &cfg->field_, .parse = parse_unsigned,   \
        .umin = (min_), .umax = (max_), .meta = "N", .help = (help_)                               \
    }
#define SHARE_OPTION(name_, share_, help_)                                                         \
    {                                                                                              \
        .name = (name_), .type = OPT_TYPE_CUSTOM, .dest = (share_), .parse = parse_share,          \
        .meta = "BYTES|P%", .help = (help_)                                                        \
    }

/* Every setting of tetris-reclaimer, as flags and as the file's keys: the
 * table's destinations are cfg's fields (shares: s's entries, which point
 * into cfg). */
struct settings {
    struct share_dest capacity, tenant_capacity, shared_capacity, max_unverified,
        max_unverified_uid, gpu_store_quota;
    struct opt_spec specs[44];
    struct opt_program program;
};

static void settings_init(struct settings *s, struct reclaimer_config *cfg)
{
    s->capacity = (struct share_dest){&cfg->capacity_bytes, &cfg->capacity_percent, NULL};
    s->tenant_capacity = (struct share_dest){&cfg->tenant_capacity_bytes,
                                             &cfg->tenant_capacity_percent, NULL};
    s->shared_capacity = (struct share_dest){&cfg->shared_capacity_bytes,
                                             &cfg->shared_capacity_percent,
                                             &cfg->shared_capacity_set};
    s->max_unverified = (struct share_dest){&cfg->max_unverified_bytes,
                                            &cfg->max_unverified_percent, NULL};
    s->max_unverified_uid = (struct share_dest){&cfg->max_unverified_uid_bytes,
                                                &cfg->max_unverified_uid_percent,
                                                &cfg->max_unverified_uid_set};
    s->gpu_store_quota = (struct share_dest){&cfg->gpu_store_quota_bytes,
                                             &cfg->gpu_store_quota_percent, NULL};
    const struct opt_spec specs[] = {
        TEXT_OPTION("store", store_dir, "DIR", "tensor store (default " STORE_DEFAULT_DIR ")"),
        {.name = "store-tmpfs",
         .type = OPT_TYPE_CUSTOM,
         .dest = &cfg->store_tmpfs,
         .parse = parse_store_tmpfs,
         .meta = "MODE",
         .help = "huge: mount a tmpfs of its own on an empty DIR with huge=within_size (2 MiB "
                 "pages); plain: the same with 4 KiB pages; none: DIR as it is (default none). "
                 "A tmpfs already mounted there is reused; a mount refused leaves DIR as it is"},
        {.name = "mount-only",
         .type = OPT_TYPE_FLAG,
         .dest = &cfg->mount_only,
         .help = "prepare the store's tmpfs, log, exit (an init container with the privilege "
                 "to mount)"},
        TEXT_OPTION("mount-namespace", mount_namespace, "PATH",
                    "with --mount-only: mount in this namespace, e.g. /proc/1/ns/mnt (the "
                    "host's, with hostPID), where function pods' host paths resolve"),
        TEXT_OPTION("listen", listen, "ADDR:PORT",
                    "HTTP address (default " TETRIS_RECLAIMER_LISTEN "; \"\" = off)"),
        PERIOD_OPTION("interval", interval_s, "between reclaim passes (default 10; 30s, 5m ok)"),
        {.name = "keep-alive",
         .type = OPT_TYPE_SECONDS,
         .dest = &cfg->keep_alive_s,
         .meta = "SECONDS",
         .help = "keep unreferenced tensors this long (default 300)"},
        SHARE_OPTION("capacity", &s->capacity,
                     "node capacity, e.g. 2Gi or 50% of the store's filesystem (default 50%; 0 "
                     "= unlimited), for all stores together: ingests past it are refused, LRU "
                     "evicts above it. Each tensor is charged its file rounded up to pages plus "
                     "1 KiB for its inode"),
        SHARE_OPTION("tenant-capacity", &s->tenant_capacity,
                     "quota of each tenant store, or P% of the node capacity (default 0 = none "
                     "but the node's)"),
        SHARE_OPTION("shared-capacity", &s->shared_capacity,
                     "quota of the shared store, or P% of the node capacity (default: "
                     "--tenant-capacity's; 0 = none)"),
        SHARE_OPTION("max-unverified-bytes", &s->max_unverified,
                     "what the claims of one store (a tenant's, or the shared one) may hold "
                     "reserved while they are read and verified (default 25% of the capacity; "
                     "0 = no bound)"),
        SHARE_OPTION("max-unverified-bytes-per-uid", &s->max_unverified_uid,
                     "the same for the claims of one peer uid (default half of "
                     "--max-unverified-bytes)"),
        {.name = "max-request-bytes",
         .type = OPT_TYPE_BYTES,
         .dest = &cfg->max_request_bytes,
         .meta = "BYTES",
         .help = "tensor bytes one ingest request may read (default 0 = its store's "
                 "capacity)"},
        PERIOD_OPTION("ingest-timeout", ingest_timeout_s,
                      "time one ingest request may take; tensors not published by then are "
                      "rejected (default 120)"),
        {.name = "scrub-rate",
         .type = OPT_TYPE_BYTES,
         .dest = &cfg->scrub_rate,
         .meta = "BYTES/SEC",
         .help = "CRC32 re-check rate (default 64Mi; 0 = off)"},
        TEXT_OPTION("node-name", node_name, "NAME",
                    "node name in " INVENTORY_PATH " (default: $" TETRIS_ENV_NODE_NAME
                    ", else the hostname)"),
        TEXT_OPTION("config", config_path, "FILE",
                    "YAML settings (the options' names, keep_alive etc.); flags override it "
                    "wherever they stand; SIGHUP re-reads it"),
        TEXT_OPTION("state-file", state_path, "FILE",
                    "last-use times (default <store>/private/reclaimer.state)"),
        TEXT_OPTION("socket", socket_path, "PATH",
                    "ingest socket (default <store>/public/ingest.sock)"),
        COUNT_OPTION("max-connections", max_connections, 1, 65536,
                     "concurrent ingest connections (default 256)"),
        COUNT_OPTION("max-connections-per-uid", max_conns_per_uid, 1, 65536,
                     "of them from one peer uid (default three quarters of --max-connections)"),
        COUNT_OPTION("max-connections-per-pid", max_conns_per_pid, 1, 65536,
                     "of them from one peer process (default 8)"),
        COUNT_OPTION("workers", workers, 0, 4096,
                     "threads that hash and publish ingests, all requests together (default 0 "
                     "= the CPUs this process may use: affinity and cgroup cpu.max)"),
        PERIOD_OPTION("request-timeout", request_timeout_s,
                      "to receive a request or send a reply (default 30)"),
        {.name = "gpu-capacity",
         .type = OPT_TYPE_BYTES,
         .dest = &cfg->gpu_capacity_bytes,
         .meta = "BYTES",
         .help = "device memory per GPU for shared tensors (gpu_attach, docs/GPU.md); LRU "
                 "evicts unreferenced ones above it (default 0 = what the device has)"},
        TEXT_OPTION("libcuda", libcuda_path, "PATH",
                    "CUDA driver library (default $" GPU_LIBCUDA_ENV ", else " GPU_LIBCUDA_DEFAULT
                    "; loaded on the first gpu_attach; a flag only, "
                    "refused in --config; the file and its directory must be root's alone)"),
        SHARE_OPTION("gpu-store-quota", &s->gpu_store_quota,
                     "device memory per GPU one store (a tenant's, or the shared one) may hold, "
                     "padded (default: an equal share of the capacity per store served)"),
        {.name = "gpu-shared-store",
         .type = OPT_TYPE_FLAG,
         .dest = &cfg->gpu_shared_store,
         .help = "serve gpu_attach on the shared store too: only where its pods trust each "
                 "other (docs/GPU.md)"},
        TEXT_OPTION("pin-file", pin_path, "FILE",
                    "digests (hex, one per line) kept as if referenced, e.g. the models of "
                    "pods scheduled to this node; re-read when it changes"),
        {.name = "tenants",
         .type = OPT_TYPE_CUSTOM,
         .dest = cfg,
         .parse = parse_tenants_opt,
         .meta = "T,...",
         .help = "the tenant stores to serve, DIR/tenants/T (made at start); no other "
                 "directory there is ever served (default none: the shared store only)"},
        COUNT_OPTION("max-tenants", max_tenants, 1, RECLAIMER_TENANTS_MAX,
                     "tenant stores served at most (default 64, max " TETRIS_STRINGIFY(
                         RECLAIMER_TENANTS_MAX) ")"),
        {.name = "no-tenants",
         .type = OPT_TYPE_FLAG,
         .dest = &cfg->no_tenants,
         .help = "serve the shared store only, whatever --tenants says"},
        {.name = "tenant-uids",
         .type = OPT_TYPE_CUSTOM,
         .dest = cfg,
         .parse = parse_tenant_uids_opt,
         .meta = "T=UID[-UID],...",
         .help = "a tenant's socket serves only these uids, and they are served on their "
                 "tenants' sockets only"},
        TEXT_OPTION("tenant-listen", tenant_listen, "ADDR:PORT",
                    "HTTP address that also serves tenants' detail (tenant inventories and "
                    "series; default \"\" = none); --listen serves the shared store and node "
                    "only"),
        PERIOD_OPTION("health-deadline", health_deadline_s,
                      "/healthz fails once no pass has completed for the interval plus this "
                      "(default 60)"),
        {.name = "registries",
         .type = OPT_TYPE_CUSTOM,
         .dest = &cfg->registries,
         .parse = parse_registries_opt,
         .meta = "[http://]HOST:PORT,...",
         .help = "the registries pods may pull models from (oci:// references), over TLS, "
                 "or plain HTTP for an entry written http://HOST:PORT; no other host is ever "
                 "contacted, redirects and token servers included (default none: pulls "
                 "refused)"},
        TEXT_OPTION("registry-auth", registry_auth, "FILE",
                    "registry credentials, a dockerconfigjson document (a Secret of type "
                    "kubernetes.io/dockerconfigjson), read again by each pull (default none: "
                    "anonymous)"),
        TEXT_OPTION("registry-ca", registry_ca, "FILE",
                    "PEM CA certificates that verify the registries' TLS certificates "
                    "(default: the system's)"),
        PERIOD_OPTION("registry-timeout", registry_timeout_s,
                      "time limit of one request to a registry (default 60)"),
        COUNT_OPTION("pull-parallel", pull_parallel, 1, 256,
                     "blobs one pull fetches at once (default 8)"),
        {.name = "registry-cache",
         .type = OPT_TYPE_BYTES,
         .dest = &cfg->registry_cache_bytes,
         .meta = "BYTES",
         .help = "pulled configs and graphs kept per store, by digest (default 256Mi)"},
        {.name = "once",
         .type = OPT_TYPE_FLAG,
         .dest = &cfg->once,
         .help = "repair and one reclaim pass, then exit"},
        {0},
    };
    static_assert(STORE_INODE_CHARGE == 1024, "--capacity's help says 1 KiB");
    static_assert(sizeof(specs) <= sizeof(s->specs), "struct settings holds every option");
    memcpy(s->specs, specs, sizeof(specs));
    s->program = (struct opt_program){
        .name = "tetris-reclaimer",
        .about = about,
        .options = s->specs,
        .epilogue = epilogue,
    };
}

static void set_defaults(struct reclaimer_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->store_dir, STORE_DEFAULT_DIR);
    strcpy(cfg->listen, TETRIS_RECLAIMER_LISTEN);
    cfg->interval_s = 10;
    cfg->keep_alive_s = 300;
    cfg->scrub_rate = 64u << 20;
    cfg->max_connections = 256;
    cfg->max_tenants = 64;
    cfg->request_timeout_s = 30;
    cfg->health_deadline_s = 60;
    cfg->capacity_percent = RECLAIMER_DEFAULT_CAPACITY_PERCENT;
    cfg->max_unverified_percent = RECLAIMER_DEFAULT_UNVERIFIED_PERCENT;
    cfg->ingest_timeout_s = 120;
    cfg->max_conns_per_pid = 8;
    cfg->registry_timeout_s = 60;
    cfg->pull_parallel = 8;
    cfg->registry_cache_bytes = 256u << 20;
    const char *node = getenv(TETRIS_ENV_NODE_NAME);
    if (node != NULL && node[0] != '\0' && strlen(node) < sizeof(cfg->node_name))
        strcpy(cfg->node_name, node);
    else if (gethostname(cfg->node_name, sizeof(cfg->node_name)) < 0)
        strcpy(cfg->node_name, "unknown");
    cfg->node_name[sizeof(cfg->node_name) - 1] = '\0';
}

/* YAML keys: the options' names, with '-' or '_' ("keep_alive" = "keep-alive"),
 * each applied by the option's own parser. Not in a file: --config, the
 * flags (what a ConfigMap's writer must not switch: --once, --mount-only,
 * --no-tenants, --gpu-shared-store) and --libcuda. */
static int apply_file(const struct settings *s, const char *path, tetris_error *err)
{
    config_yaml *y;
    int rc = config_yaml_load(path, &y, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < y->n_items && rc == 0; i++) {
        const struct config_item *it = &y->items[i];
        const struct opt_spec *spec = opt_find(&s->program, it->key);
        char where[PATH_MAX + 96];
        snprintf(where, sizeof(where), "%s:%d: %s", path, it->line, it->key);
        if (spec == NULL || spec->type == OPT_TYPE_FLAG || strcmp(spec->name, "config") == 0)
            rc = tetris_fail(err, TETRIS_E_INVAL, 0, "%s:%d: unknown setting \"%s\"", path,
                             it->line, it->key);
        /* Whoever writes the file (a ConfigMap) must not choose code the
         * root daemon loads: the driver comes from its arguments only. */
        else if (strcmp(spec->name, "libcuda") == 0)
            rc = tetris_fail(err, TETRIS_E_INVAL, 0,
                             "%s:%d: \"%s\" is refused in a settings file: the CUDA driver "
                             "is chosen by the daemon's --libcuda flag or $" GPU_LIBCUDA_ENV
                             " only",
                             path, it->line, it->key);
        else
            rc = opt_apply(&s->program, it->key, it->value, where, err);
    }
    config_yaml_free(y);
    return rc;
}

/* BYTES as given, or P% of the capacity (at least a byte of a bounded one:
 * a share never turns into "no bound"). */
static uint64_t share_of(uint64_t capacity, uint64_t bytes, double percent)
{
    if (percent <= 0)
        return bytes;
    uint64_t v = (uint64_t)((double)capacity * percent / 100);
    return v == 0 && capacity > 0 ? 1 : v;
}

/* A percentage capacity becomes bytes: that share of the filesystem the
 * store is on (its parent's while the store does not exist yet). */
int reclaimer_config_resolve_capacity(struct reclaimer_config *cfg, tetris_error *err)
{
    if (cfg->capacity_percent > 0) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", cfg->store_dir);
        struct statvfs vfs;
        while (statvfs(dir, &vfs) < 0) {
            char *slash = strrchr(dir, '/');
            if (errno != ENOENT || slash == NULL || slash == dir)
                return tetris_fail(err, TETRIS_E_INVAL, errno,
                                   "capacity %g%%: cannot size the filesystem of %s (give bytes)",
                                   cfg->capacity_percent, cfg->store_dir);
            *slash = '\0';
        }
        double fs = (double)vfs.f_blocks * (double)vfs.f_frsize;
        cfg->capacity_bytes = (uint64_t)(fs * cfg->capacity_percent / 100);
        if (cfg->capacity_bytes == 0)
            cfg->capacity_bytes = 1;
    }
    cfg->tenant_capacity_bytes = share_of(cfg->capacity_bytes, cfg->tenant_capacity_bytes,
                                          cfg->tenant_capacity_percent);
    /* The shared store is held to what each tenant is: else its pods,
     * which anyone may run, could take the room the quotas keep. */
    cfg->shared_capacity_bytes = cfg->shared_capacity_set
                                     ? share_of(cfg->capacity_bytes, cfg->shared_capacity_bytes,
                                                cfg->shared_capacity_percent)
                                     : cfg->tenant_capacity_bytes;
    cfg->max_unverified_bytes = share_of(cfg->capacity_bytes, cfg->max_unverified_bytes,
                                         cfg->max_unverified_percent);
    cfg->max_unverified_uid_bytes = cfg->max_unverified_uid_set
                                        ? share_of(cfg->capacity_bytes,
                                                   cfg->max_unverified_uid_bytes,
                                                   cfg->max_unverified_uid_percent)
                                        : cfg->max_unverified_bytes / 2;
    /* One uid may take three quarters: the rest stay for everyone else. */
    if (cfg->max_conns_per_uid == 0)
        cfg->max_conns_per_uid = cfg->max_connections - cfg->max_connections / 4;
    return 0;
}

int reclaimer_config_load(int argc, char **argv, struct reclaimer_config *cfg,
                          tetris_error *err)
{
    cleanup_free struct settings *s = malloc(sizeof(*s));
    int first;

    if (s == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, errno, "settings");
    set_defaults(cfg);
    settings_init(s, cfg);
    /* The flags are read twice, before and after the file: the file comes
     * before every flag whatever their order on the command line, and a
     * flag sets the same value both times. The first reading finds
     * --config (and every usage error). */
    if ((first = opt_parse_args(&s->program, argc, argv, err)) < 0)
        return first;
    if (first < argc)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "unexpected argument %s", argv[first]);
    if (cfg->config_path[0] != '\0') {
        int rc = apply_file(s, cfg->config_path, err);
        if (rc < 0)
            return rc;
        if ((first = opt_parse_args(&s->program, argc, argv, err)) < 0)
            return first;
    }
    if (cfg->n_tenants > cfg->max_tenants)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--tenants names %zu, --max-tenants is %u",
                           cfg->n_tenants, cfg->max_tenants);
    if (cfg->mount_namespace[0] != '\0' && !cfg->mount_only)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "--mount-namespace needs --mount-only");
    if (cfg->socket_path[0] == '\0' &&
        snprintf(cfg->socket_path, sizeof(cfg->socket_path), "%s/" STORE_PUBLIC_DIR "/ingest.sock",
                 cfg->store_dir) >= (int)sizeof(cfg->socket_path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "store path too long");
    if (cfg->state_path[0] == '\0' && snprintf(cfg->state_path, sizeof(cfg->state_path),
                                               "%s/" STORE_PRIVATE_DIR "/reclaimer.state",
                                               cfg->store_dir) >= (int)sizeof(cfg->state_path))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "store path too long");
    /* The registry files are checked now, not at the first pull: a
     * mistake is a config error, not a pod's failure hours later. */
    if (cfg->registry_auth[0] != '\0') {
        oci_credentials *creds = NULL;
        if (oci_credentials_read(cfg->registry_auth, &creds, err) < 0)
            return tetris_wrap(err, "--registry-auth");
        oci_credentials_free(creds);
    }
    if (cfg->registry_ca[0] != '\0' && oci_ca_file_check(cfg->registry_ca, err) < 0)
        return tetris_wrap(err, "--registry-ca");
    return reclaimer_config_resolve_capacity(cfg, err);
}
