/* config.c - tetris-reclaimer's settings: defaults < YAML file < flags. */
#include "reclaimer/config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/config_yaml.h"
#include "protocol/inventory.h"
#include "protocol/names.h"
#include "tensorstore/gpu/gpu.h"
#include "tensorstore/store.h"

enum {
    OPT_STORE = 256,
    OPT_LISTEN,
    OPT_INTERVAL,
    OPT_KEEP_ALIVE,
    OPT_CAPACITY,
    OPT_CONFIG,
    OPT_ONCE,
    OPT_NODE_NAME,
    OPT_SCRUB_RATE,
    OPT_STATE_FILE,
    OPT_SOCKET,
    OPT_MAX_CONNECTIONS,
    OPT_REQUEST_TIMEOUT,
    OPT_PIN_FILE,
    OPT_MAX_TENANTS,
    OPT_NO_TENANTS,
    OPT_TENANT_LISTEN,
    OPT_TENANT_UIDS,
    OPT_TENANTS,
    OPT_HEALTH_DEADLINE,
    OPT_TENANT_CAPACITY,
    OPT_MAX_REQUEST_BYTES,
    OPT_INGEST_TIMEOUT,
    OPT_MAX_CONNS_PER_UID,
    OPT_MAX_CONNS_PER_PID,
    OPT_WORKERS,
    OPT_STORE_TMPFS,
    OPT_MOUNT_ONLY,
    OPT_MOUNT_NAMESPACE,
    OPT_GPU_CAPACITY,
    OPT_LIBCUDA,
    OPT_GPU_STORE_QUOTA,
    OPT_GPU_SHARED_STORE,
    OPT_SHARED_CAPACITY,
    OPT_MAX_UNVERIFIED,
    OPT_MAX_UNVERIFIED_PER_UID,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_options[] = {
    {"store", required_argument, NULL, OPT_STORE},
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"keep-alive", required_argument, NULL, OPT_KEEP_ALIVE},
    {"capacity", required_argument, NULL, OPT_CAPACITY},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"once", no_argument, NULL, OPT_ONCE},
    {"node-name", required_argument, NULL, OPT_NODE_NAME},
    {"scrub-rate", required_argument, NULL, OPT_SCRUB_RATE},
    {"state-file", required_argument, NULL, OPT_STATE_FILE},
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
    {"request-timeout", required_argument, NULL, OPT_REQUEST_TIMEOUT},
    {"pin-file", required_argument, NULL, OPT_PIN_FILE},
    {"max-tenants", required_argument, NULL, OPT_MAX_TENANTS},
    {"no-tenants", no_argument, NULL, OPT_NO_TENANTS},
    {"tenant-listen", required_argument, NULL, OPT_TENANT_LISTEN},
    {"tenant-uids", required_argument, NULL, OPT_TENANT_UIDS},
    {"tenants", required_argument, NULL, OPT_TENANTS},
    {"health-deadline", required_argument, NULL, OPT_HEALTH_DEADLINE},
    {"tenant-capacity", required_argument, NULL, OPT_TENANT_CAPACITY},
    {"max-request-bytes", required_argument, NULL, OPT_MAX_REQUEST_BYTES},
    {"ingest-timeout", required_argument, NULL, OPT_INGEST_TIMEOUT},
    {"max-connections-per-uid", required_argument, NULL, OPT_MAX_CONNS_PER_UID},
    {"max-connections-per-pid", required_argument, NULL, OPT_MAX_CONNS_PER_PID},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"store-tmpfs", required_argument, NULL, OPT_STORE_TMPFS},
    {"mount-only", no_argument, NULL, OPT_MOUNT_ONLY},
    {"mount-namespace", required_argument, NULL, OPT_MOUNT_NAMESPACE},
    {"gpu-capacity", required_argument, NULL, OPT_GPU_CAPACITY},
    {"libcuda", required_argument, NULL, OPT_LIBCUDA},
    {"gpu-store-quota", required_argument, NULL, OPT_GPU_STORE_QUOTA},
    {"gpu-shared-store", no_argument, NULL, OPT_GPU_SHARED_STORE},
    {"shared-capacity", required_argument, NULL, OPT_SHARED_CAPACITY},
    {"max-unverified-bytes", required_argument, NULL, OPT_MAX_UNVERIFIED},
    {"max-unverified-bytes-per-uid", required_argument, NULL, OPT_MAX_UNVERIFIED_PER_UID},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

void reclaimer_usage(const char *prog)
{
    printf("Usage: %s [OPTIONS]\n"
           "The tetris node daemon: ingests tensors into the node's store for function\n"
           "instances (Unix socket <store>/public/ingest.sock), frees tensors no live holder\n"
           "references (keep-alive, then LRU above capacity), repairs after crashes,\n"
           "scrubs CRC32s, and serves /metrics, " INVENTORY_PATH " and /healthz over HTTP.\n"
           "It serves every tenant store under <store>/tenants/ the same way (socket\n"
           "<store>/tenants/NAME/public/ingest.sock); mkdir <store>/tenants/NAME adds one.\n"
           "\n"
           "  --store DIR              tensor store (default " STORE_DEFAULT_DIR ")\n"
           "  --store-tmpfs MODE       huge: mount a tmpfs of its own on an empty DIR\n"
           "                           with huge=within_size (2 MiB pages); plain: the\n"
           "                           same with 4 KiB pages; none: DIR as it is\n"
           "                           (default none). A tmpfs already mounted there is\n"
           "                           reused; a mount refused leaves DIR as it is\n"
           "  --mount-only             prepare the store's tmpfs, log, exit (an init\n"
           "                           container with the privilege to mount)\n"
           "  --mount-namespace PATH   with --mount-only: mount in this namespace, e.g.\n"
           "                           /proc/1/ns/mnt (the host's, with hostPID), where\n"
           "                           function pods' host paths resolve\n"
           "  --listen ADDR:PORT       HTTP address (default " TETRIS_RECLAIMER_LISTEN
           "; \"\" = off)\n"
           "  --interval SECONDS       between reclaim passes (default 10; 30s, 5m ok)\n"
           "  --keep-alive SECONDS     keep unreferenced tensors this long (default 300)\n"
           "  --capacity BYTES|P%%     node capacity, e.g. 2Gi or 50%% of the store's\n"
           "                           filesystem (default 50%%; 0 = unlimited), for all\n"
           "                           stores together: ingests past it are refused, LRU\n"
           "                           evicts above it. Each tensor is charged its file\n"
           "                           rounded up to pages plus %u bytes for its inode\n"
           "  --tenant-capacity BYTES|P%%  quota of each tenant store, or P%% of the node\n"
           "                           capacity (default 0 = none but the node's)\n"
           "  --shared-capacity BYTES|P%%  quota of the shared store, or P%% of the node\n"
           "                           capacity (default: --tenant-capacity's; 0 = none)\n"
           "  --max-unverified-bytes BYTES|P%%  what the claims of one store (a tenant's,\n"
           "                           or the shared one) may hold reserved while they\n"
           "                           are read and verified (default 25%% of the\n"
           "                           capacity; 0 = no bound)\n"
           "  --max-unverified-bytes-per-uid BYTES|P%%  the same for the claims of one\n"
           "                           peer uid (default half of --max-unverified-bytes)\n"
           "  --max-request-bytes BYTES  tensor bytes one ingest request may read\n"
           "                           (default 0 = its store's capacity)\n"
           "  --ingest-timeout SECS    time one ingest request may take; tensors not\n"
           "                           published by then are rejected (default 120)\n"
           "  --scrub-rate BYTES/SEC   CRC32 re-check rate (default 64Mi; 0 = off)\n"
           "  --node-name NAME         node name in " INVENTORY_PATH " (default: hostname,\n"
           "                           or $" TETRIS_ENV_NODE_NAME ")\n"
           "  --config FILE            YAML settings (same names, keep_alive etc.);\n"
           "                           flags override it; SIGHUP re-reads it\n"
           "  --state-file FILE        last-use times (default <store>/private/reclaimer.state)\n"
           "  --socket PATH            ingest socket (default <store>/public/ingest.sock)\n"
           "  --max-connections N      concurrent ingest connections (default 256)\n"
           "  --max-connections-per-uid N  of them from one peer uid (default three\n"
           "                           quarters of --max-connections)\n"
           "  --max-connections-per-pid N  of them from one peer process (default 8)\n"
           "  --workers N              threads that hash and publish ingests, all\n"
           "                           requests together (default 0 = the CPUs this\n"
           "                           process may use: affinity and cgroup cpu.max)\n"
           "  --request-timeout SECS   to receive a request or send a reply (default 30)\n"
           "  --gpu-capacity BYTES     device memory per GPU for shared tensors (gpu_attach,\n"
           "                           docs/GPU.md); LRU evicts unreferenced ones above it\n"
           "                           (default 0 = what the device has)\n"
           "  --libcuda PATH           CUDA driver library (default $" GPU_LIBCUDA_ENV ",\n"
           "                           else " GPU_LIBCUDA_DEFAULT "; loaded on the first\n"
           "                           gpu_attach; a flag only, refused in --config; the\n"
           "                           file and its directory must be root's alone)\n"
           "  --gpu-store-quota BYTES|P%%  device memory per GPU one store (a tenant's,\n"
           "                           or the shared one) may hold, padded (default:\n"
           "                           an equal share of the capacity per store served)\n"
           "  --gpu-shared-store       serve gpu_attach on the shared store too: only\n"
           "                           where its pods trust each other (docs/GPU.md)\n"
           "  --pin-file FILE          digests (hex, one per line) kept as if referenced,\n"
           "                           e.g. the models of pods scheduled to this node;\n"
           "                           re-read when it changes\n"
           "  --tenants T,...          the tenant stores to serve, DIR/tenants/T (made at\n"
           "                           start); no other directory there is ever served\n"
           "                           (default none: the shared store only)\n"
           "  --max-tenants N          tenant stores served at most (default 64, max %d)\n"
           "  --no-tenants             serve the shared store only, whatever --tenants says\n"
           "  --tenant-uids T=UID[-UID],...  a tenant's socket serves only these uids,\n"
           "                           and they are served on their tenants' sockets only\n"
           "  --tenant-listen ADDR:PORT  HTTP address that also serves tenants' detail\n"
           "                           (tenant inventories and series; default \"\" = none);\n"
           "                           --listen serves the shared store and node only\n"
           "  --health-deadline SECS   /healthz fails once no pass has completed for\n"
           "                           the interval plus this (default 60)\n"
           "  --once                   repair and one reclaim pass, then exit\n"
           "  --help, --version\n"
           "\n"
           "Signals: SIGHUP reloads the config file; SIGTERM/SIGINT stop cleanly.\n"
           "Exit status: 0 stopped cleanly (or --once done), 1 runtime failure\n"
           "(store, socket or HTTP address unusable), 2 usage or config error, 3 the\n"
           "store is not this daemon's to serve, nothing was changed: another live daemon\n"
           "serves it, or it is refused (a link, not this user's, writable by others, or\n"
           "the old layout).\n",
           prog, STORE_INODE_CHARGE, RECLAIMER_TENANTS_MAX);
}

/* The caller's error context names the setting (flag or file key). */
static int parse_count(const char *s, unsigned *out, tetris_error *err)
{
    uint64_t v;
    int rc = cli_parse_u64(NULL, s, 1, 65536, &v, err);
    if (rc == 0)
        *out = (unsigned)v;
    return rc;
}

static int copy_string(char *dst, size_t len, const char *what, const char *v, tetris_error *err)
{
    if (strlen(v) >= len)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s too long", what);
    strcpy(dst, v);
    return 0;
}

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

/* A duration the daemon waits or loops on: 0 (or near) would spin. */
static int parse_period(const char *v, double *out, const char *what, tetris_error *err)
{
    if (config_parse_seconds(v, out, err) < 0)
        return -TETRIS_E_INVAL;
    if (*out < 0.01)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s %s is too short", what, v);
    return 0;
}

/* BYTES, or P% (0 < P <= 100) of something resolved later. */
static int parse_share(const char *v, uint64_t *bytes, double *percent, tetris_error *err)
{
    size_t n = strlen(v);
    *bytes = 0;
    *percent = 0;
    if (n == 0 || v[n - 1] != '%')
        return config_parse_bytes(v, bytes, err);
    char *end;
    double p = strtod(v, &end);
    if (end != v + n - 1 || !(p > 0 && p <= 100))
        return tetris_fail(err, TETRIS_E_INVAL, 0, "%s: want BYTES or a percentage in (0, 100]", v);
    *percent = p;
    return 0;
}

/* Applies one setting by its flag id; shared by the file and the flags. */
static int apply(struct reclaimer_config *cfg, int opt, const char *v, tetris_error *err)
{
    switch (opt) {
    case OPT_STORE:
        return copy_string(cfg->store_dir, sizeof(cfg->store_dir), "store", v, err);
    case OPT_LISTEN:
        return copy_string(cfg->listen, sizeof(cfg->listen), "listen", v, err);
    case OPT_TENANT_LISTEN:
        return copy_string(cfg->tenant_listen, sizeof(cfg->tenant_listen), "tenant listen", v, err);
    case OPT_TENANT_UIDS: return parse_tenant_uids(cfg, v, err);
    case OPT_TENANTS: return parse_tenants(cfg, v, err);
    case OPT_HEALTH_DEADLINE:
        return parse_period(v, &cfg->health_deadline_s, "health deadline", err);
    case OPT_INTERVAL: return parse_period(v, &cfg->interval_s, "interval", err);
    case OPT_KEEP_ALIVE:
        return config_parse_seconds(v, &cfg->keep_alive_s, err);
    case OPT_CAPACITY: return parse_share(v, &cfg->capacity_bytes, &cfg->capacity_percent, err);
    case OPT_TENANT_CAPACITY:
        return parse_share(v, &cfg->tenant_capacity_bytes, &cfg->tenant_capacity_percent, err);
    case OPT_SHARED_CAPACITY:
        cfg->shared_capacity_set = true;
        return parse_share(v, &cfg->shared_capacity_bytes, &cfg->shared_capacity_percent, err);
    case OPT_MAX_UNVERIFIED:
        return parse_share(v, &cfg->max_unverified_bytes, &cfg->max_unverified_percent, err);
    case OPT_MAX_UNVERIFIED_PER_UID:
        cfg->max_unverified_uid_set = true;
        return parse_share(v, &cfg->max_unverified_uid_bytes, &cfg->max_unverified_uid_percent,
                           err);
    case OPT_MAX_REQUEST_BYTES: return config_parse_bytes(v, &cfg->max_request_bytes, err);
    case OPT_INGEST_TIMEOUT: return parse_period(v, &cfg->ingest_timeout_s, "ingest timeout", err);
    case OPT_MAX_CONNS_PER_UID: return parse_count(v, &cfg->max_conns_per_uid, err);
    case OPT_MAX_CONNS_PER_PID: return parse_count(v, &cfg->max_conns_per_pid, err);
    case OPT_WORKERS: {
        uint64_t n;
        int rc = cli_parse_u64(NULL, v, 0, 4096, &n, err);
        if (rc == 0)
            cfg->workers = (unsigned)n;
        return rc;
    }
    case OPT_STORE_TMPFS: return store_tmpfs_parse_mode(v, &cfg->store_tmpfs, err);
    case OPT_MOUNT_NAMESPACE:
        return copy_string(cfg->mount_namespace, sizeof(cfg->mount_namespace), "mount namespace", v,
                           err);
    case OPT_SCRUB_RATE:
        return config_parse_bytes(v, &cfg->scrub_rate, err);
    case OPT_GPU_CAPACITY: return config_parse_bytes(v, &cfg->gpu_capacity_bytes, err);
    case OPT_GPU_STORE_QUOTA:
        return parse_share(v, &cfg->gpu_store_quota_bytes, &cfg->gpu_store_quota_percent, err);
    case OPT_LIBCUDA:
        return copy_string(cfg->libcuda_path, sizeof(cfg->libcuda_path), "libcuda", v, err);
    case OPT_NODE_NAME:
        return copy_string(cfg->node_name, sizeof(cfg->node_name), "node name", v, err);
    case OPT_STATE_FILE:
        return copy_string(cfg->state_path, sizeof(cfg->state_path), "state file", v, err);
    case OPT_SOCKET:
        return copy_string(cfg->socket_path, sizeof(cfg->socket_path), "socket", v, err);
    case OPT_PIN_FILE:
        return copy_string(cfg->pin_path, sizeof(cfg->pin_path), "pin file", v, err);
    case OPT_MAX_CONNECTIONS:
        return parse_count(v, &cfg->max_connections, err);
    case OPT_MAX_TENANTS:
        if (parse_count(v, &cfg->max_tenants, err) < 0)
            return -TETRIS_E_INVAL;
        if (cfg->max_tenants > RECLAIMER_TENANTS_MAX)
            return tetris_fail(err, TETRIS_E_INVAL, 0, "at most %d tenants", RECLAIMER_TENANTS_MAX);
        return 0;
    case OPT_REQUEST_TIMEOUT:
        return parse_period(v, &cfg->request_timeout_s, "request timeout", err);
    default:
        return tetris_fail(err, TETRIS_E_INVAL, 0, "unknown setting");
    }
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
    const char *node = getenv(TETRIS_ENV_NODE_NAME);
    if (node != NULL && node[0] != '\0' && strlen(node) < sizeof(cfg->node_name))
        strcpy(cfg->node_name, node);
    else if (gethostname(cfg->node_name, sizeof(cfg->node_name)) < 0)
        strcpy(cfg->node_name, "unknown");
    cfg->node_name[sizeof(cfg->node_name) - 1] = '\0';
}

/* YAML keys: the flag names, with '-' or '_' ("keep_alive" = "keep-alive"). */
static int apply_file(struct reclaimer_config *cfg, const char *path, tetris_error *err)
{
    config_yaml *y;
    int rc = config_yaml_load(path, &y, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < y->n_items && rc == 0; i++) {
        const struct config_item *it = &y->items[i];
        char name[64];
        snprintf(name, sizeof(name), "%s", it->key);
        for (char *p = name; *p; p++)
            if (*p == '_')
                *p = '-';
        int opt = -1;
        for (const struct option *o = long_options; o->name != NULL; o++)
            if (strcmp(o->name, name) == 0 && o->has_arg == required_argument &&
                o->val != OPT_CONFIG)
                opt = o->val;
        if (opt < 0)
            rc = tetris_fail(err, TETRIS_E_INVAL, 0, "%s:%d: unknown setting \"%s\"", path,
                             it->line, it->key);
        /* Whoever writes the file (a ConfigMap) must not choose code the
         * root daemon loads: the driver comes from its arguments only. */
        else if (opt == OPT_LIBCUDA)
            rc = tetris_fail(err, TETRIS_E_INVAL, 0,
                             "%s:%d: \"%s\" is refused in a settings file: the CUDA driver "
                             "is chosen by the daemon's --libcuda flag or $" GPU_LIBCUDA_ENV
                             " only",
                             path, it->line, it->key);
        else if ((rc = apply(cfg, opt, it->value, err)) < 0)
            rc = tetris_wrap(err, "%s:%d: %s", path, it->line, it->key);
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
    set_defaults(cfg);
    /* First pass: only --config, --help, --version (the file comes before
     * the other flags whatever their order on the command line). */
    optind = 1;
    opterr = 0;
    for (;;) {
        int opt = getopt_long(argc, argv, "", long_options, NULL);
        if (opt == -1)
            break;
        if (opt == OPT_HELP) {
            reclaimer_usage(argv[0]);
            return 1;
        }
        if (opt == OPT_VERSION) {
            printf("tetris-reclaimer %s\n", TETRIS_VERSION);
            return 1;
        }
        if (opt == '?')
            return tetris_fail(err, TETRIS_E_INVAL, 0, "unknown or incomplete option %s",
                               argv[optind - 1]);
        if (opt == OPT_CONFIG && copy_string(cfg->config_path, sizeof(cfg->config_path),
                                             "config path", optarg, err) < 0)
            return -TETRIS_E_INVAL;
    }
    if (optind < argc)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "unexpected argument %s", argv[optind]);
    if (cfg->config_path[0] != '\0') {
        int rc = apply_file(cfg, cfg->config_path, err);
        if (rc < 0)
            return rc;
    }
    optind = 1;
    for (;;) {
        int opt = getopt_long(argc, argv, "", long_options, NULL);
        if (opt == -1)
            break;
        if (opt == OPT_ONCE) {
            cfg->once = true;
            continue;
        }
        if (opt == OPT_NO_TENANTS) {
            cfg->no_tenants = true;
            continue;
        }
        if (opt == OPT_GPU_SHARED_STORE) {
            cfg->gpu_shared_store = true;
            continue;
        }
        if (opt == OPT_MOUNT_ONLY) {
            cfg->mount_only = true;
            continue;
        }
        if (opt == OPT_CONFIG)
            continue;
        int rc = apply(cfg, opt, optarg, err);
        if (rc < 0)
            return tetris_wrap(err, "--%s", long_options[opt - OPT_STORE].name);
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
    return reclaimer_config_resolve_capacity(cfg, err);
}
