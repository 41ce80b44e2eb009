/* config.h - tetris-reclaimer settings: defaults, then the YAML file
 * (--config), then command-line flags, in that order of precedence. SIGHUP
 * re-runs the same sequence, so a flag keeps overriding the file. */
#ifndef TETRIS_RECLAIMER_CONFIG_H
#define TETRIS_RECLAIMER_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "protocol/oci.h"
#include "reclaimer/store_tmpfs.h"

/* Tenant stores one daemon can serve (--max-tenants caps it lower): each
 * costs a socket, an accept thread and an index, and adds one value of the
 * tenant label to every per-store metric. */
#define RECLAIMER_TENANTS_MAX 256

/* uid ranges a tenant's socket serves (--tenant-uids). */
#define RECLAIMER_TENANT_UIDS_MAX 64

struct reclaimer_tenant_uids {
    char tenant[64];
    uint32_t lo, hi; /* inclusive */
};
/* Registries a pull may reach (--registries): the operator's list, each
 * "host:port" as written (host lowercased), compared with a reference's
 * exactly (reclaimer/pull.h); plain[i]: entry i was written
 * "http://HOST:PORT", a registry without TLS. */
#define RECLAIMER_REGISTRIES_MAX 64
#define RECLAIMER_REGISTRY_LEN (OCI_HOST_MAX + 8) /* ":65535" and the NUL */

struct reclaimer_registries {
    size_t n;
    char entries[RECLAIMER_REGISTRIES_MAX][RECLAIMER_REGISTRY_LEN];
    bool plain[RECLAIMER_REGISTRIES_MAX];
};

/* Without --capacity: this share of the store's filesystem. A node store
 * without a bound lets one pod fill the node's memory (tmpfs is RAM). */
#define RECLAIMER_DEFAULT_CAPACITY_PERCENT 50
/* Without --max-unverified-bytes: this share of the capacity. Claims hold
 * their room while the daemon reads and hashes them; a bound per store and
 * per uid keeps claims that will fail from taking the room of others. */
#define RECLAIMER_DEFAULT_UNVERIFIED_PERCENT 25

struct reclaimer_config {
    char store_dir[PATH_MAX];
    char config_path[PATH_MAX];  /* "" if none */
    char state_path[PATH_MAX];   /* "" -> <store>/private/reclaimer.state */
    char socket_path[PATH_MAX];  /* "" -> <store>/public/ingest.sock */
    char pin_path[PATH_MAX];     /* "" -> no pinned digests */
    char listen[128];            /* HTTP ADDR:PORT, "" disables HTTP */
    char tenant_listen[128];     /* HTTP with tenants' detail, "" = none */
    char node_name[256];
    double interval_s;           /* between reclaim passes */
    double keep_alive_s;         /* cold tensors live this long after last use */
    uint64_t capacity_bytes;     /* 0: unlimited (only when asked for) */
    double capacity_percent;     /* >0: capacity_bytes is this share of the
                                    store's filesystem (resolved at load) */
    uint64_t tenant_capacity_bytes; /* each tenant store's quota, 0: none */
    double tenant_capacity_percent; /* >0: that share of the node capacity */
    uint64_t shared_capacity_bytes; /* the shared store's quota, 0: none */
    double shared_capacity_percent;
    bool shared_capacity_set;          /* else it is the tenants' quota */
    uint64_t max_unverified_bytes;     /* claims of one store being read and
                                          verified, 0: no bound */
    double max_unverified_percent;     /* >0: that share of the node capacity */
    uint64_t max_unverified_uid_bytes; /* the same for one peer uid */
    double max_unverified_uid_percent;
    bool max_unverified_uid_set;    /* else half the store's */
    uint64_t max_request_bytes;     /* bytes one ingest request may read,
                                       0: its store's capacity */
    double ingest_timeout_s;        /* time one ingest request may take */
    unsigned max_conns_per_uid;     /* ingest connections of one peer uid */
    unsigned max_conns_per_pid;     /* ... of one peer process */
    unsigned workers;               /* ingest hashing threads, all requests
                                       together; 0: the CPU allowance */
    uint64_t scrub_rate;         /* CRC-checked bytes per second, 0: off */
    uint64_t gpu_capacity_bytes; /* per GPU, shared tensors; 0: the device's */
    char libcuda_path[PATH_MAX]; /* "" -> $TETRIS_LIBCUDA or libcuda.so.1 */
    uint64_t gpu_store_quota_bytes; /* per store and GPU, padded; 0: an equal */
    double gpu_store_quota_percent; /* share; >0: this share of the capacity */
    bool gpu_shared_store;          /* gpu_attach served on the shared store */
    unsigned max_connections;    /* concurrent ingest connections */
    double request_timeout_s;    /* to receive a request / send a reply */
    double health_deadline_s;    /* /healthz fails once no pass completed
                                    for interval + this */
    struct reclaimer_tenant_uids tenant_uids[RECLAIMER_TENANT_UIDS_MAX];
    size_t n_tenant_uids;        /* 0: tenant sockets serve any peer */
    /* The tenant stores served: the operator's list (--tenants), never a
     * directory that appears under DIR/tenants/ (a pod can make one). */
    char tenants[RECLAIMER_TENANTS_MAX][64];
    size_t n_tenants;
    unsigned max_tenants;        /* tenant stores served at most */
    bool no_tenants;             /* serve the shared store only */
    struct reclaimer_registries registries; /* none: pulls are refused */
    double registry_timeout_s;              /* one request to a registry */
    unsigned pull_parallel;                 /* blobs one pull fetches at once */
    uint64_t registry_cache_bytes;          /* configs and graphs kept per store */
    char registry_auth[PATH_MAX];           /* a dockerconfigjson file; "": anonymous */
    char registry_ca[PATH_MAX];             /* a PEM CA bundle; "": the system's */
    bool once;                   /* one pass, then exit */
    enum store_tmpfs_mode store_tmpfs; /* a tmpfs of the daemon's own? */
    bool mount_only;                   /* prepare the store's tmpfs, then exit */
    char mount_namespace[PATH_MAX];    /* --mount-only: mount in this one */
};

/* Defaults, then the file named by --config (if any), then the flags: one
 * table of options (config.c) parses both. Returns 0, or <0 on a usage or
 * config error (err names the flag, or the file's line and key). --help and
 * --version print and exit(0). */
int reclaimer_config_load(int argc, char **argv, struct reclaimer_config *cfg,
                          tetris_error *err);

/* Turns a percentage capacity into bytes of the store's filesystem as it is
 * now: load does it, and the daemon again once it mounted its tmpfs. */
int reclaimer_config_resolve_capacity(struct reclaimer_config *cfg, tetris_error *err);

/* Whether a peer of this uid may use the store of tenant ("" for the
 * shared store): a uid bound to tenants (--tenant-uids) may use theirs
 * only; a tenant with bindings serves its uids only; anything else is
 * open to whoever can reach the socket. */
bool reclaimer_peer_allowed(const struct reclaimer_config *cfg, const char *tenant, uid_t uid);

#endif
