/* volumes.h - tetris-csi's volumes: a model view per CSI inline volume,
 * mounted read-only at the kubelet's target path, and the references to
 * its tensors held for exactly the volume's life. The plugin's files are
 * listed here:
 *   tetris-csi.c   the program: options, the gRPC services (Identity,
 *                  Node, the kubelet's plugin registration), the run loop
 *   volumes.c      publish and unpublish, the records, recovery at start
 *   tenant_map.c   which store a pod's volume uses (tenant_map.h)
 *
 * A volume's store is the shared one (DIR) or a tenant's (DIR/tenants/
 * NAME), chosen by the tenant map from the pod's identity. On disk:
 *   DIR/private/volumes/<key>/volume.json  the record: volume id, target
 *                                      path, model (a file, or a registry
 *                                      reference and the manifest digest it
 *                                      was pulled as), the pod's identity,
 *                                      the tenant (null: shared); written
 *                                      last (by rename), so a directory
 *                                      without it is an unfinished publish
 *   DIR/private/volumes/<key>/view/    the model view (agent/view.h), its
 *                                      tensors/ empty: bind-mounted
 *                                      read-only at the target path, with
 *                                      the volume's store's public/tensors
 *                                      mounted read-only on its tensors/
 *   STORE/private/holders/csi-<key>.keep  the kept holder of its tensors
 *                                      (tensorstore/store.h), in the
 *                                      volume's store STORE
 * The records and views of every tenant's volumes are in the shared
 * store's private/ (one place to find a volume by its id); what a pod
 * sees is its own store's tensors only. <key> is the hex SHA-256 of the
 * volume id, so any id maps to one safe name. Nothing here is reachable
 * from a pod but the view and its store's tensors, through read-only
 * mounts.
 *
 * Invariants (tests/csi/test-csi.sh checks each):
 *   - a volume whose publish returned OK has its record, its view mounted
 *     read-only at its target and its kept holder, until its unpublish
 *     returns OK; a failed publish leaves none of the three (no mount, no
 *     reference);
 *   - publish and unpublish are idempotent; a second publish of a volume
 *     at another target or of another model is ALREADY_EXISTS and changes
 *     nothing;
 *   - after a restart of the plugin, the records whose views are still
 *     mounted (with their store's tensors) are the volumes; every other
 *     record, view directory and csi- kept holder, in the shared store
 *     and in every tenant store the daemon made, is an unfinished publish
 *     or unpublish and is removed (the kubelet retries a publish it was
 *     not answered). The daemon's restarts do not touch kept holders;
 *   - a volume named by a registry reference is the manifest its tag
 *     resolved to when it was published (the record's digest): a
 *     republish or a restart never pulls or resolves it again
 *     (tests/csi/test-csi-registry.sh);
 *   - a volume's tensors mount and kept holder are its record's store's,
 *     and that store is what the tenant map said for the pod when it was
 *     published: a tenant's volume shows nothing of another store
 *     (tests/csi/test-csi-tenants.sh).
 *   - a volume's store is chosen once, when it is first published; a
 *     tenant map changed since (its file followed, tenant_map.h) applies
 *     to new volumes: a published volume, its republish by the same pod
 *     and its recovery after a restart keep its record's store.
 * Publishes and unpublishes run one at a time (one lock): the kubelet
 * sends few, each is bounded by the model's load. The tenant map is
 * asked, and replaced by its file's new text, only under that lock, and
 * a publish keeps a copy of the answer: no answer outlives its map. */
#ifndef TETRIS_CSI_VOLUMES_H
#define TETRIS_CSI_VOLUMES_H

#include <stddef.h>

#include "common/error.h"
#include "common/grpc.h"
#include "protocol/csi.h"
#include "reclaimer/csi/tenant_map.h"

struct csi_volumes_config {
    const char *store_dir;     /* the daemon's store root */
    const char *daemon_socket; /* NULL: <store>/public/ingest.sock */
    const char *pods_dir;      /* target paths must be beneath it */
    const char *models_dir;    /* model files must be beneath it */
    int max_volumes;
    int daemon_timeout_ms;
    int pull_timeout_ms;       /* a reference's pull; <= 0: the agent's default */
    /* NULL: every volume is the shared store's. Followed: its file is
     * refreshed under the lock by each publish that asks it. */
    tenant_map_file *tenants;
};

typedef struct csi_volumes csi_volumes;

/* Opens the store (as a writer: the plugin runs as the store's owner) and
 * the tenant stores the daemon made, makes private/volumes/ and recovers
 * what a previous run left (above; recovery reads the records, never the
 * tenant map). The tenant map is the caller's and must outlive the
 * handle; the handle refreshes it, so nobody else uses it meanwhile.
 * TETRIS_E_NOTFOUND without a store, TETRIS_E_DENIED for a store that is
 * not ours, TETRIS_E_INVAL for a pods or models directory that does not
 * resolve. */
int csi_volumes_open(const struct csi_volumes_config *c, csi_volumes **out, tetris_error *err);
void csi_volumes_close(csi_volumes *v);
size_t csi_volumes_count(csi_volumes *v);

/* NodePublishVolume and NodeUnpublishVolume: fill reply (its status is
 * the call's, the message says why) and log the outcome once. */
void csi_volumes_publish(csi_volumes *v, const struct csi_publish_request *r,
                         struct grpc_reply *reply);
void csi_volumes_unpublish(csi_volumes *v, const struct csi_unpublish_request *r,
                           struct grpc_reply *reply);

#endif
