/* pull.h - the node daemon's side of a pull (protocol/ingest.h, op
 * "pull"): a model named by an OCI reference (protocol/oci.h) fetched
 * from a registry the operator allows, tensor by tensor, into the store.
 *
 * A pull is an ingest whose bytes come from a registry instead of a
 * pod's descriptors, and it takes the same path (ingest_server.c): each
 * missing tensor is a claim against the capacity, fetched straight into
 * the store's temp file and published by store_publish_tensor, which
 * re-hashes it (a tensor layer's blob is its identity's input, so the
 * registry's digest and the store's are one); the connection then holds
 * references to every tensor of the model. What it adds is the registry:
 *   registry_allow.c  which registries may be reached (--registries), at
 *                     which address (resolved once, pinned), over which
 *                     scheme (TLS unless listed http://, loopback may fall
 *                     back), and that no pod makes the daemon reach
 *                     loopback, link-local or metadata addresses the
 *                     operator did not name;
 *   pull.c            the credentials (--registry-auth, read again by each
 *                     pull) and CA bundle (--registry-ca) a pull's registry
 *                     session uses (protocol/oci.h: challenges, tokens,
 *                     retries), the manifest (a tag resolved to a digest
 *                     once; a pinned digest checked), the config and the
 *                     non-weight layer (cached per store by digest under
 *                     private/registry/, bounded by --registry-cache), and
 *                     each tensor blob's bytes, held to the declared size
 *                     (a broken download resumed, each byte written once).
 *
 * Invariants: no request leaves for a host:port the list does not name
 * (redirects and token realms included, each checked before it is
 * asked); credentials come from the operator's file only and go to the
 * registry and its realm only; nothing unverified is published or cached
 * (a blob's bytes are hashed before they are a file anyone can open); a
 * failed pull records no reference, leaves no temp file and leaves the
 * store as it was: the tensors it published before it failed are
 * withdrawn (ingest_server.c, store_withdraw in reclaim.c) unless a live
 * holder, a pin or another request in flight wants them by then.
 * Tests: tests/reclaimer/test-pull.sh (a real registry),
 * tests/reclaimer/test-pull-auth.sh (real ones with basic auth and TLS),
 * tests/reclaimer/test-pull-faults.sh (a hostile one),
 * tests/reclaimer/test-pull-retries.sh (flaky and token-locked ones),
 * tests/reclaimer/test_reclaimer_units.c (the allow-list). */
#ifndef TETRIS_RECLAIMER_PULL_H
#define TETRIS_RECLAIMER_PULL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/error.h"
#include "model/model.h"
#include "protocol/oci.h"
#include "reclaimer/config.h"
#include "tensorstore/store.h"

/* ---- registry_allow.c ---- */

/* Whether host:port (as in a reference; a host compared without case) is
 * on the list. */
bool registry_listed(const struct reclaimer_registries *list, const char *host, unsigned port);
/* Loopback, link-local (169.254/16, fe80::/10), unspecified, a metadata
 * service's (169.254.169.254, fd00:ec2::254, 100.100.100.200), or an IPv4
 * one of those mapped into IPv6; any family but IPv4 and IPv6 too. */
bool registry_address_special(const struct sockaddr *sa);
/* oci_admit_fn's rule: TETRIS_E_DENIED for host:port not on the list, or
 * resolving to a special address the operator did not name (the listed
 * host is that very address, or "localhost"); else resolve is
 * "NAME:PORT:ADDRESS" to pin a name's connection to the address checked
 * ("" for an address, which needs no resolving), and *scheme
 * OCI_SCHEME_HTTP for an entry written http://, OCI_SCHEME_HTTPS_OR_HTTP
 * for a loopback address the operator named, else OCI_SCHEME_HTTPS. */
int registry_admit(const struct reclaimer_registries *list, const char *host, unsigned port,
                   char *resolve, size_t cap, enum oci_scheme *scheme, tetris_error *err);

/* ---- pull.c ---- */

/* Bounded reasons a pull fails, the label of tetris_pull_failures_total. */
enum pull_failure {
    PULL_FAIL_DENIED = 0, /* a registry or redirect target not allowed */
    PULL_FAIL_REGISTRY,   /* unreachable, an error status, not found */
    PULL_FAIL_FORMAT,     /* a manifest or config that is not a model */
    PULL_FAIL_CORRUPT,    /* bytes that are not their digest or size */
    PULL_FAIL_STORE,      /* the store: full, or its files */
    PULL_FAIL_TIMEOUT,
    PULL_FAIL_REASONS,
};
const char *pull_failure_name(enum pull_failure f);
/* The reason of a failure of code (a tetris_code). */
enum pull_failure pull_failure_of(int code);

#define PULL_DURATION_BUCKETS 12
extern const double pull_duration_bounds[PULL_DURATION_BUCKETS];

/* What a pull may do, copied from the daemon's settings when it begins. */
struct pull_settings {
    struct reclaimer_registries allowed; /* --registries */
    double timeout_s;                    /* one request (--registry-timeout) */
    uint64_t cache_max;                  /* private/registry/'s bytes (--registry-cache) */
    char auth_path[PATH_MAX];            /* --registry-auth: read by each pull; "": none */
    char ca_file[PATH_MAX];              /* --registry-ca; "": the system's */
};

/* What a pull found before any tensor was fetched: the manifest by
 * digest, its artifact and model (the config), and the config and
 * non-weight layer as read-only descriptors of their cached files. */
struct pull_plan {
    oci_ref ref;
    oci_registry reg; /* open from pull_prepare's start to pull_plan_release */
    struct pull_settings settings;
    oci_credentials *credentials; /* settings.auth_path's, NULL without */
    tensor_digest manifest_digest;
    oci_artifact *artifact;
    model *model;
    int config_fd, graph_fd;
    store *store;
};

/* Resolves ref_text and fetches what comes before the tensors, into
 * plan (released by pull_plan_release, also after a failure). The
 * credentials file is read here, each pull, so a Secret updated in place
 * is used without a restart. */
int pull_prepare(store *s, const char *ref_text, const struct pull_settings *settings,
                 struct pull_plan *plan, tetris_error *err);
void pull_plan_release(struct pull_plan *plan);

/* Publishes tensor t of the plan (a tensor layer of its artifact) into
 * its store, fetching its blob straight into the store's temp file;
 * check (may be NULL) is asked between pieces, as model_publish.h's.
 * *published as store_publish_tensor's. */
int pull_publish_tensor(struct pull_plan *plan, const tensor_desc *t,
                        int (*check)(void *ctx, tetris_error *err), void *check_ctx,
                        bool *published, tetris_error *err);

#endif
