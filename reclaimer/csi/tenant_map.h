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
 * csi.unmappedPods), read by tetris-csi when it starts. Whoever can write
 * it decides every pod's tenant, so the plugin trusts its location, not
 * its text: every line is checked and one bad line refuses the whole file
 * (the plugin does not start).
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

#endif
