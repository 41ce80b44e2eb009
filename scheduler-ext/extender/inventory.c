/* inventory.c - node inventory cache: parsing (the document is
 * protocol/inventory.h's), parallel conditional fetches (common/httpclient),
 * and the poller thread. See inventory.h.
 *
 * A node's shared store is cached under the node's name; a tenant's store
 * under "NODE/TENANT" (neither a node name nor a tenant name holds a
 * '/'), fetched from the node's URL with ?tenant=TENANT. */
#include "scheduler-ext/extender/inventory.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/httpclient.h"
#include "common/log.h"
#include "common/strmap.h"
#include "protocol/names.h"

typedef struct node_entry {
    char *url;
    char *node;           /* a tenant entry's node; NULL for the shared store */
    char *etag;           /* of inv */
    node_inventory *inv;  /* NULL until the first successful fetch */
    int64_t last_ok_ms;   /* last 200/304 (monotonic) */
    int64_t last_try_ms;  /* last attempt started */
    bool in_flight;
    bool failing;         /* the last fetch failed (logged once per outage) */
    bool pinned;          /* installed by inventory_cache_put: never stale */
} node_entry;

struct inventory_cache {
    tensor_ids *ids;
    inventory_opts o;
    pthread_rwlock_t lock; /* the map and every entry */
    strmap *nodes;         /* node name -> node_entry */
    pthread_rwlock_t hook_lock; /* prepare and its user, held while it runs */
    inventory_prepare_fn prepare;
    void *prepare_user;
    pthread_t poller;
    bool polling;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stop;
    atomic_uint_least64_t fetch_ok, fetch_not_modified, fetch_error;
};

void inventory_opts_init(inventory_opts *o)
{
    *o = (inventory_opts){.refresh_ms = 1000, .stale_ms = 30000, .timeout_ms = 1000,
                          .max_parallel = 32, .max_bytes = 64u << 20};
}

inventory_cache *inventory_cache_new(tensor_ids *ids, const inventory_opts *o)
{
    inventory_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->nodes = strmap_new();
    if (c->nodes == NULL) {
        free(c);
        return NULL;
    }
    c->ids = ids;
    if (o != NULL)
        c->o = *o;
    else
        inventory_opts_init(&c->o);
    pthread_rwlock_init(&c->lock, NULL);
    pthread_rwlock_init(&c->hook_lock, NULL);
    pthread_mutex_init(&c->stop_lock, NULL);
    pthread_cond_init(&c->stop_cond, NULL);
    return c;
}

static void free_entry(void *p)
{
    node_entry *e = p;
    if (e == NULL)
        return;
    free(e->url);
    free(e->node);
    free(e->etag);
    node_inventory_free(e->inv);
    free(e);
}

void inventory_cache_free(inventory_cache *c)
{
    if (c == NULL)
        return;
    if (c->polling) {
        pthread_mutex_lock(&c->stop_lock);
        c->stop = true;
        pthread_cond_signal(&c->stop_cond);
        pthread_mutex_unlock(&c->stop_lock);
        pthread_join(c->poller, NULL);
    }
    strmap_free(c->nodes, free_entry);
    pthread_rwlock_destroy(&c->lock);
    pthread_rwlock_destroy(&c->hook_lock);
    pthread_mutex_destroy(&c->stop_lock);
    pthread_cond_destroy(&c->stop_cond);
    free(c);
}

/* ---- parsing ---- */

int inventory_parse(tensor_ids *ids, const char *json, size_t len, node_inventory **out,
                    tetris_error *err)
{
    inventory_doc *doc;
    int r = inventory_decode(json, len, &doc, err);
    if (r < 0)
        return r;
    node_inventory *inv = node_inventory_new();
    /* The ids in a scratch array, then kept as an id_set of exactly their
     * size. */
    uint32_t *scratch = malloc((doc->n_tensors ? doc->n_tensors : 1) * sizeof *scratch);
    if (inv == NULL || scratch == NULL)
        r = tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory");
    /* n counts the references taken, so a failure releases them. */
    size_t n = 0;
    while (r == 0 && n < doc->n_tensors) {
        r = tensor_ids_intern_digest(ids, &doc->tensors[n].digest, &scratch[n], err);
        if (r == 0)
            n++;
    }
    if (r == 0)
        r = node_inventory_set_ids(inv, ids, scratch, n, err);
    else if (scratch != NULL)
        tensor_ids_release(ids, scratch, n);
    free(scratch);
    if (r == 0) {
        inv->generation = doc->generation;
        inv->capacity_bytes = doc->capacity_bytes;
        inv->resident_bytes = doc->resident_bytes;
        inv->evictable_bytes = doc->evictable_bytes;
        *out = inv;
    } else {
        node_inventory_free(inv);
    }
    inventory_doc_free(doc);
    return r;
}

/* ---- where inventories are ---- */

void inventory_url_policy_init(inventory_url_policy *p, int default_port)
{
    *p = (inventory_url_policy){.default_port = default_port,
                                .n_ranges = 1,
                                .ranges = {{default_port, default_port}}};
}

static int parse_port(const char *s, char **end)
{
    errno = 0;
    long v = strtol(s, end, 10);
    return errno == 0 && *end != s && v >= 1 && v <= 65535 && isdigit((unsigned char)*s) ? (int)v
                                                                                         : -1;
}

int inventory_url_policy_ports(inventory_url_policy *p, const char *list, tetris_error *err)
{
    inventory_url_policy q = *p;
    q.n_ranges = 0;
    const char *s = list;
    for (;;) {
        char *end;
        int lo = parse_port(s, &end), hi = lo;
        if (lo > 0 && *end == '-')
            hi = parse_port(end + 1, &end);
        if (lo < 0 || hi < lo || (*end != ',' && *end != '\0') ||
            q.n_ranges == INVENTORY_PORT_RANGES_MAX)
            return tetris_fail(err, TETRIS_E_INVAL, 0,
                               "inventory ports '%s': want up to %d of PORT or LO-HI, "
                               "comma-separated, within 1-65535",
                               list, INVENTORY_PORT_RANGES_MAX);
        q.ranges[q.n_ranges][0] = lo;
        q.ranges[q.n_ranges][1] = hi;
        q.n_ranges++;
        if (*end == '\0')
            break;
        s = end + 1;
    }
    *p = q;
    return 0;
}

static bool port_allowed(const inventory_url_policy *p, long port)
{
    for (size_t i = 0; i < p->n_ranges; i++)
        if (port >= p->ranges[i][0] && port <= p->ranges[i][1])
            return true;
    return false;
}

/* An IP literal as bytes (4 or 16) in out; 0 when host is none. */
static size_t ip_bytes(const char *host, unsigned char out[16])
{
    if (inet_pton(AF_INET, host, out) == 1)
        return 4;
    if (inet_pton(AF_INET6, host, out) == 1)
        return 16;
    return 0;
}

/* The node's next InternalIP address from index *i on (advancing *i past
 * it), or NULL. */
static const char *next_internal_ip(json_t *node, size_t *i)
{
    json_t *addresses = json_object_get(json_object_get(node, "status"), "addresses");
    while (*i < json_array_size(addresses)) {
        json_t *a = json_array_get(addresses, (*i)++);
        const char *type = json_string_value(json_object_get(a, "type"));
        const char *addr = json_string_value(json_object_get(a, "address"));
        if (type != NULL && addr != NULL && strcmp(type, "InternalIP") == 0)
            return addr;
    }
    return NULL;
}

/* Whether host (an IP literal) is 127.0.0.1 or one of node's InternalIPs. */
static bool host_allowed(json_t *node, const char *host)
{
    unsigned char want[16], have[16];
    size_t n = ip_bytes(host, want);
    if (n == 0)
        return false;
    if (n == 4 && ip_bytes("127.0.0.1", have) == 4 && memcmp(want, have, 4) == 0)
        return true;
    const char *addr;
    for (size_t i = 0; (addr = next_internal_ip(node, &i)) != NULL;)
        if (ip_bytes(addr, have) == n && memcmp(want, have, n) == 0)
            return true;
    return false;
}

/* Checks an annotation's URL: http://HOST:PORT/inventory, nothing else. */
static int check_url(json_t *node, const inventory_url_policy *p, const char *url,
                     tetris_error *err)
{
    static const char scheme[] = "http://";
    char host[64];
    const char *s = url;
    if (strncmp(s, scheme, sizeof scheme - 1) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "inventory URL %.200s: not http://", url);
    s += sizeof scheme - 1;
    const char *host_end;
    if (*s == '[') {
        host_end = strchr(++s, ']');
        if (host_end == NULL || host_end[1] != ':')
            return tetris_fail(err, TETRIS_E_DENIED, 0, "inventory URL %.200s: want [IPv6]:PORT",
                               url);
    } else {
        host_end = strchr(s, ':');
        if (host_end == NULL || memchr(s, '/', (size_t)(host_end - s)) != NULL ||
            memchr(s, '@', (size_t)(host_end - s)) != NULL)
            return tetris_fail(err, TETRIS_E_DENIED, 0,
                               "inventory URL %.200s: want HOST:PORT with an IP address", url);
    }
    if ((size_t)(host_end - s) >= sizeof host)
        return tetris_fail(err, TETRIS_E_DENIED, 0, "inventory URL %.200s: host too long", url);
    memcpy(host, s, (size_t)(host_end - s));
    host[host_end - s] = '\0';
    unsigned char ip[16];
    if (ip_bytes(host, ip) != (*host_end == ']' ? 16u : 4u))
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "inventory URL %.200s: host is not an IP address", url);
    const char *port_start = host_end + (*host_end == ']' ? 2 : 1);
    char *end;
    int port = parse_port(port_start, &end);
    if (port < 0 || strcmp(end, INVENTORY_PATH) != 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "inventory URL %.200s: want http://HOST:PORT" INVENTORY_PATH, url);
    if (!host_allowed(node, host))
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "inventory URL %.200s: host is neither the node's InternalIP "
                           "nor 127.0.0.1",
                           url);
    if (!port_allowed(p, port))
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "inventory URL %.200s: port %d is not an allowed inventory port", url,
                           port);
    return 0;
}

int inventory_url_from_node(json_t *node, const inventory_url_policy *p, char *buf, size_t size,
                            tetris_error *err)
{
    json_t *meta = json_object_get(node, "metadata");
    const char *url = json_string_value(
        json_object_get(json_object_get(meta, "annotations"), TETRIS_ANNOTATION_INVENTORY_URL));
    if (url != NULL && url[0] != '\0') {
        int r = check_url(node, p, url, err);
        if (r < 0)
            return r;
        int n = snprintf(buf, size, "%s", url);
        return n > 0 && (size_t)n < size
                   ? 0
                   : tetris_fail(err, TETRIS_E_DENIED, 0, "inventory URL too long");
    }
    const char *addr;
    for (size_t i = 0; (addr = next_internal_ip(node, &i)) != NULL;) {
        unsigned char ip[16];
        size_t len = ip_bytes(addr, ip);
        if (len == 0)
            continue;
        int n = snprintf(buf, size,
                         len == 16 ? "http://[%s]:%d" INVENTORY_PATH
                                   : "http://%s:%d" INVENTORY_PATH,
                         addr, p->default_port);
        if (n > 0 && (size_t)n < size)
            return 0;
    }
    return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "node has no InternalIP address");
}

/* ---- tenants ---- */

bool inventory_tenant_valid(const char *tenant)
{
    size_t len = strlen(tenant);
    if (len == 0 || len > INVENTORY_TENANT_MAX ||
        strspn(tenant, "abcdefghijklmnopqrstuvwxyz0123456789._-") != len)
        return false;
    return strcmp(tenant, ".") != 0 && strstr(tenant, "..") == NULL;
}

/* The cache key of node's store for tenant (NULL: the shared store); false
 * when it does not fit, which only an absurd node name does. */
static bool entry_key(const char *node, const char *tenant, char *buf, size_t size)
{
    int n = tenant == NULL ? snprintf(buf, size, "%s", node)
                           : snprintf(buf, size, "%s/%s", node, tenant);
    return n > 0 && (size_t)n < size;
}

/* The tenant's inventory URL on the node whose shared one is base. */
static char *tenant_url(const char *base, const char *tenant)
{
    char *url = NULL;
    if (asprintf(&url, "%s%c" INVENTORY_TENANT_PARAM "=%s", base,
                 strchr(base, '?') != NULL ? '&' : '?', tenant) < 0)
        return NULL;
    return url;
}

/* ---- the table ---- */

static node_entry *entry_for(inventory_cache *c, const char *key, tetris_error *err)
{
    node_entry *e = strmap_get(c->nodes, key);
    if (e != NULL)
        return e;
    e = calloc(1, sizeof *e);
    if (e == NULL || strmap_put(c->nodes, key, e) == STRMAP_NOMEM) {
        free(e);
        tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory cache");
        return NULL;
    }
    return e;
}

/* Points e at url (a copy); a changed URL voids what e holds. 1 when it
 * changed. */
static int entry_set_url(node_entry *e, const char *url, tetris_error *err)
{
    if (e->url != NULL && strcmp(e->url, url) == 0)
        return 0;
    char *copy = strdup(url);
    if (copy == NULL)
        return tetris_fail(err, TETRIS_E_NOMEM, ENOMEM, "inventory cache");
    /* Another daemon answers now: what the old one said is void. */
    free(e->url);
    e->url = copy;
    free(e->etag);
    e->etag = NULL;
    node_inventory_free(e->inv);
    e->inv = NULL;
    e->last_try_ms = 0;
    e->pinned = false;
    return 1;
}

typedef struct node_tenants {
    const char *node;
    const char *url;     /* set_url: the node's new URL */
    char **keys;         /* forget: the tenant entries to remove */
    size_t n, cap;
    int r;
    tetris_error *err;
} node_tenants;

static int follow_node_url(const char *key, void *value, void *user)
{
    (void)key;
    node_tenants *t = user;
    node_entry *e = value;
    if (e->node == NULL || strcmp(e->node, t->node) != 0)
        return 0;
    const char *tenant = key + strlen(e->node) + 1;
    char *url = tenant_url(t->url, tenant);
    int r = url != NULL ? entry_set_url(e, url, t->err)
                        : tetris_fail(t->err, TETRIS_E_NOMEM, ENOMEM, "inventory cache");
    free(url);
    t->r = r < 0 ? r : 0;
    return r < 0;
}

int inventory_cache_set_url(inventory_cache *c, const char *node, const char *url,
                            tetris_error *err)
{
    pthread_rwlock_wrlock(&c->lock);
    int r = -TETRIS_E_NOMEM;
    node_entry *e = entry_for(c, node, err);
    if (e != NULL)
        r = entry_set_url(e, url, err);
    if (r == 1) {
        /* the node's tenant stores are served by the same daemon */
        node_tenants t = {.node = node, .url = url, .err = err};
        strmap_foreach(c->nodes, follow_node_url, &t);
        r = t.r;
    }
    pthread_rwlock_unlock(&c->lock);
    return r;
}

static int collect_node_tenants(const char *key, void *value, void *user)
{
    node_tenants *t = user;
    node_entry *e = value;
    if (e->node == NULL || strcmp(e->node, t->node) != 0)
        return 0;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 8;
        char **k = realloc(t->keys, cap * sizeof *k);
        if (k == NULL)
            return 1;
        t->keys = k;
        t->cap = cap;
    }
    if ((t->keys[t->n] = strdup(key)) == NULL)
        return 1;
    t->n++;
    return 0;
}

/* Under the write lock. An in-flight fetch still refers to the entry: keep
 * it, urlless, so the poller leaves it alone. */
static node_entry *remove_entry(inventory_cache *c, const char *key)
{
    node_entry *e = strmap_get(c->nodes, key);
    if (e != NULL && e->in_flight) {
        free(e->url);
        e->url = NULL;
        return NULL;
    }
    if (e != NULL)
        strmap_remove(c->nodes, key);
    return e;
}

void inventory_cache_forget(inventory_cache *c, const char *node)
{
    node_tenants t = {.node = node};
    pthread_rwlock_wrlock(&c->lock);
    free_entry(remove_entry(c, node));
    strmap_foreach(c->nodes, collect_node_tenants, &t);
    for (size_t i = 0; i < t.n; i++)
        free_entry(remove_entry(c, t.keys[i]));
    pthread_rwlock_unlock(&c->lock);
    for (size_t i = 0; i < t.n; i++)
        free(t.keys[i]);
    free(t.keys);
}

void inventory_cache_set_prepare(inventory_cache *c, inventory_prepare_fn fn, void *user)
{
    /* Waits for a running hook: its user may be going away. */
    pthread_rwlock_wrlock(&c->hook_lock);
    c->prepare = fn;
    c->prepare_user = user;
    pthread_rwlock_unlock(&c->hook_lock);
}

/* Before inv is published and without the table's lock (the hook takes
 * others). */
static void prepare(inventory_cache *c, node_inventory *inv)
{
    pthread_rwlock_rdlock(&c->hook_lock);
    if (c->prepare != NULL && inv != NULL)
        c->prepare(c->prepare_user, inv);
    pthread_rwlock_unlock(&c->hook_lock);
}

int inventory_cache_put(inventory_cache *c, const char *node, node_inventory *inv,
                        tetris_error *err)
{
    prepare(c, inv);
    pthread_rwlock_wrlock(&c->lock);
    node_entry *e = entry_for(c, node, err);
    if (e != NULL) {
        node_inventory_free(e->inv);
        e->inv = inv;
        e->pinned = true;
        e->last_ok_ms = clock_mono_ms();
    }
    pthread_rwlock_unlock(&c->lock);
    if (e == NULL) {
        node_inventory_free(inv);
        return -TETRIS_E_NOMEM;
    }
    return 0;
}

void inventory_cache_rdlock(inventory_cache *c)
{
    pthread_rwlock_rdlock(&c->lock);
}

void inventory_cache_unlock(inventory_cache *c)
{
    pthread_rwlock_unlock(&c->lock);
}

static const node_inventory *usable(const inventory_cache *c, const node_entry *e)
{
    if (e == NULL || e->inv == NULL)
        return NULL;
    if (!e->pinned && clock_mono_ms() - e->last_ok_ms > c->o.stale_ms)
        return NULL;
    return e->inv;
}

const node_inventory *inventory_cache_find(inventory_cache *c, const char *node,
                                           const char *tenant)
{
    char key[INVENTORY_KEY_MAX];
    if (tenant == NULL)
        return usable(c, strmap_get(c->nodes, node));
    if (!entry_key(node, tenant, key, sizeof key))
        return NULL;
    return usable(c, strmap_get(c->nodes, key));
}

typedef struct each_ctx {
    void (*fn)(void *user, const node_inventory *inv);
    void *user;
} each_ctx;

static int each_inventory(const char *key, void *value, void *user)
{
    (void)key;
    const node_entry *e = value;
    each_ctx *x = user;
    if (e->inv != NULL)
        x->fn(x->user, e->inv);
    return 0;
}

void inventory_cache_each(inventory_cache *c, void (*fn)(void *user, const node_inventory *inv),
                          void *user)
{
    each_ctx x = {fn, user};
    strmap_foreach(c->nodes, each_inventory, &x);
}

/* ---- fetching ---- */

typedef struct fetch_job {
    char *node;
    char *url;
    char *etag; /* sent as If-None-Match */
    httpclient_request rq;
} fetch_job;

static void job_free(fetch_job *j)
{
    free(j->node);
    free(j->url);
    free(j->etag);
    httpclient_request_clear(&j->rq);
}

/* Applies one finished job to the table. */
static void apply_job(inventory_cache *c, fetch_job *j)
{
    node_inventory *inv = NULL;
    tetris_error err = {0};
    bool ok = false, not_modified = false;
    const httpclient_request *rq = &j->rq;
    if (rq->rc == 0 && rq->status == 304 && j->etag != NULL) {
        not_modified = true;
    } else if (rq->rc == 0 && rq->status == 200) {
        ok = inventory_parse(c->ids, rq->body, rq->len, &inv, &err) == 0;
        if (ok)
            prepare(c, inv);
    } else if (rq->rc == 0) {
        tetris_fail(&err, TETRIS_E_HTTP, 0, "HTTP %ld", rq->status);
    } else {
        err = rq->err;
    }
    bool log_failure = false, log_recovery = false;
    pthread_rwlock_wrlock(&c->lock);
    node_entry *e = strmap_get(c->nodes, j->node);
    if (e != NULL) {
        e->in_flight = false;
        bool failed = !ok && !not_modified;
        log_failure = failed && !e->failing;
        log_recovery = !failed && e->failing;
        e->failing = failed;
        /* The URL may have changed while we fetched; then this is void. */
        bool current = e->url != NULL && strcmp(e->url, j->url) == 0;
        if (current && (ok || not_modified)) {
            e->last_ok_ms = clock_mono_ms();
            if (ok) {
                node_inventory_free(e->inv);
                e->inv = inv;
                inv = NULL;
                free(e->etag);
                e->etag = j->rq.etag;
                j->rq.etag = NULL;
            }
        }
    }
    pthread_rwlock_unlock(&c->lock);
    node_inventory_free(inv);
    if (ok)
        atomic_fetch_add(&c->fetch_ok, 1);
    else if (not_modified)
        atomic_fetch_add(&c->fetch_not_modified, 1);
    else
        atomic_fetch_add(&c->fetch_error, 1);
    if (log_failure)
        log_warn("event=inventory-fetch-failed node=%s url=%s msg=%s", j->node, j->url,
                 LOG_Q(err.msg));
    if (log_recovery)
        log_info("event=inventory-fetch-recovered node=%s url=%s", j->node, j->url);
}

typedef struct job_list {
    inventory_cache *c;
    fetch_job *jobs;
    size_t n, cap;
    int64_t now;
    bool missing_only;
} job_list;

static bool add_job(job_list *l, const char *node, node_entry *e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        fetch_job *j = realloc(l->jobs, cap * sizeof *j);
        if (j == NULL)
            return false;
        l->jobs = j;
        l->cap = cap;
    }
    fetch_job *j = &l->jobs[l->n];
    memset(j, 0, sizeof *j);
    j->node = strdup(node);
    j->url = strdup(e->url);
    j->etag = e->etag != NULL && e->inv != NULL ? strdup(e->etag) : NULL;
    if (j->node == NULL || j->url == NULL) {
        job_free(j);
        return false;
    }
    j->rq = (httpclient_request){.url = j->url, .if_none_match = j->etag,
                                 .timeout_ms = l->c->o.timeout_ms,
                                 .max_body = l->c->o.max_bytes,
                                 .user_agent = "tetris-scheduler-ext/" TETRIS_VERSION};
    e->in_flight = true;
    e->last_try_ms = l->now;
    l->n++;
    return true;
}

static bool due(const job_list *l, const node_entry *e)
{
    if (e->url == NULL || e->in_flight || e->pinned)
        return false;
    if (l->missing_only && e->inv != NULL)
        return false;
    return e->last_try_ms == 0 || l->now - e->last_try_ms >= l->c->o.refresh_ms;
}

static int collect_due(const char *node, void *value, void *user)
{
    job_list *l = user;
    node_entry *e = value;
    if (due(l, e) && !add_job(l, node, e))
        return 1;
    return 0;
}

static void run_list(job_list *l)
{
    httpclient_request **rqs = malloc((l->n ? l->n : 1) * sizeof *rqs);
    for (size_t i = 0; i < l->n; i++) {
        if (rqs != NULL)
            rqs[i] = &l->jobs[i].rq;
        else
            l->jobs[i].rq.rc = tetris_fail(&l->jobs[i].rq.err, TETRIS_E_NOMEM, ENOMEM,
                                           "inventory fetches");
    }
    if (rqs != NULL)
        httpclient_get_all(rqs, l->n, (unsigned)l->c->o.max_parallel);
    free(rqs);
    for (size_t i = 0; i < l->n; i++) {
        apply_job(l->c, &l->jobs[i]);
        job_free(&l->jobs[i]);
    }
    free(l->jobs);
}

/* Under the write lock: the tenant's entry on node, created (and pointed
 * at the node daemon's URL) on first use; NULL while the node's URL is
 * unknown. */
static node_entry *tenant_entry(inventory_cache *c, const char *node, const char *key,
                                const char *tenant)
{
    tetris_error err = {0};
    node_entry *base = strmap_get(c->nodes, node);
    if (base == NULL || base->url == NULL)
        return NULL;
    node_entry *e = entry_for(c, key, &err);
    if (e == NULL)
        return NULL;
    if (e->node == NULL && (e->node = strdup(node)) == NULL)
        return NULL;
    if (e->url == NULL) {
        char *url = tenant_url(base->url, tenant);
        int r = url != NULL ? entry_set_url(e, url, &err) : -TETRIS_E_NOMEM;
        free(url);
        if (r < 0)
            return NULL;
    }
    return e;
}

void inventory_cache_fetch_missing(inventory_cache *c, const char *const *nodes, size_t n,
                                   const char *tenant)
{
    job_list l = {.c = c, .now = clock_mono_ms(), .missing_only = true};
    if (tenant != NULL && !inventory_tenant_valid(tenant))
        return;
    pthread_rwlock_wrlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        char key[INVENTORY_KEY_MAX];
        if (!entry_key(nodes[i], tenant, key, sizeof key))
            continue;
        node_entry *e = tenant != NULL ? tenant_entry(c, nodes[i], key, tenant)
                                       : strmap_get(c->nodes, key);
        if (e != NULL && due(&l, e) && !add_job(&l, key, e))
            break;
    }
    pthread_rwlock_unlock(&c->lock);
    run_list(&l);
}

void inventory_cache_refresh(inventory_cache *c)
{
    job_list l = {.c = c, .now = clock_mono_ms()};
    pthread_rwlock_wrlock(&c->lock);
    strmap_foreach(c->nodes, collect_due, &l);
    pthread_rwlock_unlock(&c->lock);
    run_list(&l);
}

static void *poll_loop(void *arg)
{
    inventory_cache *c = arg;
    pthread_mutex_lock(&c->stop_lock);
    while (!c->stop) {
        pthread_mutex_unlock(&c->stop_lock);
        inventory_cache_refresh(c);
        pthread_mutex_lock(&c->stop_lock);
        struct timespec until = clock_timespec((double)(clock_wall_ms() + c->o.refresh_ms));
        if (!c->stop)
            pthread_cond_timedwait(&c->stop_cond, &c->stop_lock, &until);
    }
    pthread_mutex_unlock(&c->stop_lock);
    return NULL;
}

int inventory_cache_start(inventory_cache *c, tetris_error *err)
{
    int e = pthread_create(&c->poller, NULL, poll_loop, c);
    if (e != 0)
        return tetris_fail(err, TETRIS_E_IO, e, "inventory poller thread");
    c->polling = true;
    return 0;
}

typedef struct count_ctx {
    inventory_cache *c;
    inventory_stats *s;
} count_ctx;

static int count_node(const char *node, void *value, void *user)
{
    count_ctx *x = user;
    node_entry *e = value;
    x->s->bytes += sizeof *e + strlen(node) + 1;
    x->s->bytes += (e->url ? strlen(e->url) + 1 : 0) + (e->node ? strlen(e->node) + 1 : 0) +
                   (e->etag ? strlen(e->etag) + 1 : 0);
    if (e->inv != NULL)
        x->s->bytes += node_inventory_bytes(e->inv);
    if (e->node != NULL)
        return 0; /* a tenant's store: the node counts once */
    if (e->url != NULL)
        x->s->nodes++;
    if (usable(x->c, e) != NULL)
        x->s->fresh++;
    return 0;
}

void inventory_cache_stats(inventory_cache *c, inventory_stats *out)
{
    memset(out, 0, sizeof *out);
    out->fetch_ok = atomic_load(&c->fetch_ok);
    out->fetch_not_modified = atomic_load(&c->fetch_not_modified);
    out->fetch_error = atomic_load(&c->fetch_error);
    count_ctx x = {c, out};
    pthread_rwlock_rdlock(&c->lock);
    strmap_foreach(c->nodes, count_node, &x);
    pthread_rwlock_unlock(&c->lock);
}
