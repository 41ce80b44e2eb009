/* tenant_map.h - which store a CSI volume uses, chosen from the pod's
 * identity: the cluster admin's map from a pod's namespace and service
 * account to a tenant's store (DIR/tenants/NAME) or the shared one. The
 * identity is the kubelet's (the volume context's
 * csi.storage.k8s.io/pod.namespace and serviceAccount.name, which the
 * kubelet writes over whatever the pod put there when the CSIDriver has
 * podInfoOnMount), never a tenant the pod names: a volume attribute
 * naming one is refused before the map is asked.
 *
 * The file is written by the chart from its values (csi.tenantMap and
 * csi.unmappedPods) into a ConfigMap, read by tetris-csi when it starts
 * and followed after (tenant_map_file below: a helm upgrade changes the
 * map of new volumes without a restart). Whoever can write it decides
 * every pod's tenant, so the plugin trusts its location, not its text:
 * every line is checked and one bad line refuses the whole file (at
 * start the plugin does not start; later the map before it stays).
 *
 * Format, per line, three fields separated by blanks:
 *   NAMESPACE  SERVICE-ACCOUNT  STORE
 * NAMESPACE is a Kubernetes namespace name (an RFC 1123 label) or "*",
 * SERVICE-ACCOUNT a service account name (an RFC 1123 subdomain) or "*"
 * (any of the namespace's); "*" as the namespace needs "*" as the service
 * account (a service account belongs to its namespace). STORE is
 * "tenant:NAME" (NAME a tenant name, store_tenant_check) or "shared".
 * '#' starts a comment; blank lines are skipped. A pod gets the STORE of
 * the most specific line that matches it: its namespace and service
 * account, else its namespace and "*", else "* *". Two lines with the same
 * NAMESPACE and SERVICE-ACCOUNT are an error (the map must say one thing).
 * A pod no line matches has no store: tetris-csi refuses its volume
 * (PERMISSION_DENIED). So an admin who maps some namespaces to tenants
 * says with "* * shared" whether every other pod may use the shared store
 * (a typo in a tenant's namespace name then loads that tenant's model into
 * the shared store, where every shared pod sees it; without the line it
 * is refused instead).
 *
 *   # team-a's pods are tenant alpha's, team-b's inference pods beta's
 *   team-a  *          tenant:alpha
 *   team-b  inference  tenant:beta
 *   *       *          shared
 *
 * Invariant (asserted at the end of tenant_map_parse): every tenant a map
 * holds passes store_tenant_check, so DIR/tenants/NAME stays under DIR. */
#ifndef TETRIS_CSI_TENANT_MAP_H
#define TETRIS_CSI_TENANT_MAP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

/* The largest map read, and the most rules in it: an admin's list, not a
 * database. */
#define TENANT_MAP_MAX_BYTES (1u << 20)
#define TENANT_MAP_MAX_RULES 4096
/* The longest line: a namespace (63), a service account (253), a store
 * ("tenant:" and a tenant name), blanks and a comment. */
#define TENANT_MAP_LINE_MAX 511

#define TENANT_MAP_ANY "*"
#define TENANT_MAP_SHARED "shared"
#define TENANT_MAP_TENANT_PREFIX "tenant:"

typedef struct tenant_map tenant_map;

/* Parses text (len bytes; NULs are an error) into *out. name labels
 * errors: TETRIS_E_FORMAT "name:LINE: ..." for a bad field, a line longer
 * than TENANT_MAP_LINE_MAX, a repeated NAMESPACE and SERVICE-ACCOUNT or
 * more than TENANT_MAP_MAX_RULES rules; TETRIS_E_NOMEM. A text without
 * rules is a map that refuses every pod. */
int tenant_map_parse(const char *text, size_t len, const char *name, tenant_map **out,
                     tetris_error *err);
/* Reads and parses the file at path (at most TENANT_MAP_MAX_BYTES);
 * TETRIS_E_NOTFOUND when it does not exist. */
int tenant_map_read(const char *path, tenant_map **out, tetris_error *err);
void tenant_map_free(tenant_map *m);
size_t tenant_map_rules(const tenant_map *m);

/* The store of a pod in namespace ns with service account sa (either
 * may be "", when the kubelet did not say: only "* *" matches then).
 * Returns true when a rule matches, with *tenant the tenant's name (owned
 * by the map) or NULL for the shared store; false when none does. */
bool tenant_map_lookup(const tenant_map *m, const char *ns, const char *sa, const char **tenant);

/* ---- the file, followed ----
 *
 * A map file that may change under the plugin: the kubelet updates a
 * mounted ConfigMap by writing the new files beside the old ones and
 * swapping a symbolic link (..data), so the path names a new file (a new
 * inode); an admin's editor may rewrite it in place (a new size or
 * modification time). The file is known by what stat(2) says of the path,
 * links followed: device, inode, size and modification time. The path is
 * stat'ed before the file is read, so a text always is as new as the
 * identity kept with it or newer: a change while it is read is seen by
 * the next refresh and read again, never missed. (An in-place rewrite of
 * the same size within one tick of the file system's clock looks like no
 * change; the kubelet's swap always is one.)
 *
 * Invariant: tenant_map_file_map() is always a map that parsed (the one
 * read at open, or a newer one); a text that does not parse, or a path
 * that names nothing, never replaces it. Not thread-safe: the caller
 * serializes refreshes and lookups (tetris-csi: under its volumes' lock),
 * and no answer of a map is used after the refresh that may free it. */
typedef struct tenant_map_file tenant_map_file;

/* Reads the map at path as tenant_map_read does (same errors) and
 * remembers the file it read. */
int tenant_map_file_open(const char *path, tenant_map_file **out, tetris_error *err);
void tenant_map_file_free(tenant_map_file *f);

/* Re-reads the file when the path names another file than the last one
 * looked at (device, inode, size or modification time differ). Returns 0
 * when nothing changed (or the change was refused already), 1 when the new
 * text is the map now, or a negative code with err set when the change is
 * refused and the map before it stays: TETRIS_E_NOTFOUND when the path
 * names nothing now, else tenant_map_read's error (TETRIS_E_FORMAT with
 * the line named). A refused change is reported once: the next refresh
 * returns 0 until the path names another file again. */
int tenant_map_file_refresh(tenant_map_file *f, tetris_error *err);

/* The map in use: valid until the next refresh or free. */
const tenant_map *tenant_map_file_map(const tenant_map_file *f);
const char *tenant_map_file_path(const tenant_map_file *f);

#endif
