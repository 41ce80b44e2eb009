/* test_reclaimer_units.c - tetris-reclaimer's pure parts: size and
 * duration parsing, the YAML settings reader, settings precedence (file <
 * flags), the tensor index (hash table with deletions, state file) and
 * the registries a pull may reach (--registries, registry_allow.c). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "reclaimer/config.h"
#include "common/config_yaml.h"
#include "reclaimer/pull.h"
#include "reclaimer/reclaim_policy.h"
#include "reclaimer/tensor_index.h"
#include "tests/lib/unit.h"

START_TEST(test_parse_bytes)
{
    uint64_t v;
    tetris_error err;
    ck_assert_int_eq(config_parse_bytes("4096", &v, &err), 0);
    ck_assert_uint_eq(v, 4096);
    ck_assert_int_eq(config_parse_bytes("2Gi", &v, &err), 0);
    ck_assert_uint_eq(v, 2ull << 30);
    ck_assert_int_eq(config_parse_bytes("64Ki", &v, &err), 0);
    ck_assert_uint_eq(v, 65536);
    ck_assert_int_eq(config_parse_bytes("1.5G", &v, &err), 0);
    ck_assert_uint_eq(v, 1500000000ull);
    ck_assert_int_eq(config_parse_bytes("10M", &v, &err), 0);
    ck_assert_uint_eq(v, 10000000ull);
    ck_assert_int_eq(config_parse_bytes("", &v, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(config_parse_bytes("-1", &v, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(config_parse_bytes("12Qi", &v, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(config_parse_bytes("1e30", &v, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(config_parse_bytes("nan", &v, &err), -TETRIS_E_INVAL);
}
END_TEST

START_TEST(test_parse_seconds)
{
    double v;
    tetris_error err;
    ck_assert_int_eq(config_parse_seconds("30", &v, &err), 0);
    ck_assert(v == 30);
    ck_assert_int_eq(config_parse_seconds("5m", &v, &err), 0);
    ck_assert(v == 300);
    ck_assert_int_eq(config_parse_seconds("500ms", &v, &err), 0);
    ck_assert(v == 0.5);
    ck_assert_int_eq(config_parse_seconds("1h", &v, &err), 0);
    ck_assert(v == 3600);
    ck_assert_int_eq(config_parse_seconds("3x", &v, &err), -TETRIS_E_INVAL);
    ck_assert_int_eq(config_parse_seconds("-3", &v, &err), -TETRIS_E_INVAL);
}
END_TEST

START_TEST(test_yaml_nested)
{
    const char *text = "interval: 5\n"
                       "scrub:\n"
                       "  rate: 10Mi\n"
                       "  deep:\n"
                       "    x: y\n"
                       "keep_alive: 2m\n";
    config_yaml *c;
    tetris_error err;
    ck_assert_int_eq(config_yaml_parse(text, strlen(text), "t.yaml", &c, &err), 0);
    ck_assert_uint_eq(c->n_items, 4);
    ck_assert_str_eq(config_yaml_get(c, "interval")->value, "5");
    ck_assert_str_eq(config_yaml_get(c, "scrub.rate")->value, "10Mi");
    ck_assert_str_eq(config_yaml_get(c, "scrub.deep.x")->value, "y");
    ck_assert_str_eq(config_yaml_get(c, "keep_alive")->value, "2m");
    ck_assert_int_eq(config_yaml_get(c, "keep_alive")->line, 6);
    ck_assert_ptr_null(config_yaml_get(c, "scrub"));
    config_yaml_free(c);
}
END_TEST

START_TEST(test_yaml_bad)
{
    static const char *bad[] = {
        "a: [1, 2]\n",      "a: {b: c\n",      "- a\n- b\n",   "just a scalar\n",
        "a: &x 1\nb: *x\n", "? {a: b}\n: c\n", "a: 1\na: 2\n", "a: 1\n---\nb: 2\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        config_yaml *c = NULL;
        tetris_error err;
        ck_assert_msg(config_yaml_parse(bad[i], strlen(bad[i]), "bad.yaml", &c, &err) ==
                          -TETRIS_E_FORMAT,
                      "accepted: %s", bad[i]);
        ck_assert_ptr_nonnull(strstr(err.msg, "bad.yaml"));
    }
    /* The messages point at the line. */
    config_yaml *c = NULL;
    tetris_error err;
    const char *list = "a: 1\nb:\n  c: [1]\n";
    ck_assert_int_eq(config_yaml_parse(list, strlen(list), "l.yaml", &c, &err), -TETRIS_E_FORMAT);
    ck_assert_str_eq(err.msg, "l.yaml:3: lists are not supported here");
    const char *dup = "a: 1\nb: 2\na: 3\n";
    ck_assert_int_eq(config_yaml_parse(dup, strlen(dup), "d.yaml", &c, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "duplicate key 'a' at line 3"));
    ck_assert_int_eq(config_yaml_parse("", 0, "empty.yaml", &c, &err), 0);
    ck_assert_uint_eq(c->n_items, 0);
    config_yaml_free(c);
}
END_TEST

/* A settings file holding text, in a scratch directory of its own: the
 * caller frees the path. */
static char *write_temp(const char *text)
{
    char *path = NULL;
    ck_assert_int_ge(asprintf(&path, "%s/settings.yaml", unit_scratch_dir("reclaimer-test")), 0);
    unit_write_text(path, text);
    return path;
}

START_TEST(test_config_precedence)
{
    char *path = write_temp("store: /tmp/s1\ninterval: 7\nkeep_alive: 1m\ncapacity: 1Gi\n"
                            "node_name: from-file\ngpu_capacity: 2Gi\n");
    char *argv[] = {"tetris-reclaimer", "--interval",        "3", "--config", path,
                    "--libcuda",        "/opt/libcuda.so.1", NULL};
    struct reclaimer_config cfg;
    tetris_error err;
    ck_assert_int_eq(reclaimer_config_load(7, argv, &cfg, &err), 0);
    ck_assert_str_eq(cfg.store_dir, "/tmp/s1");
    ck_assert(cfg.interval_s == 3); /* the flag wins even before --config */
    ck_assert(cfg.keep_alive_s == 60);
    ck_assert_uint_eq(cfg.capacity_bytes, 1ull << 30);
    ck_assert_str_eq(cfg.node_name, "from-file");
    ck_assert_uint_eq(cfg.gpu_capacity_bytes, 2ull << 30);
    ck_assert_str_eq(cfg.libcuda_path, "/opt/libcuda.so.1");
    ck_assert_str_eq(cfg.socket_path, "/tmp/s1/public/ingest.sock");
    ck_assert_str_eq(cfg.state_path, "/tmp/s1/private/reclaimer.state");
    unlink(path);
    free(path);

    /* The driver the root daemon loads is the DaemonSet's, never the
     * settings file's (whoever may write its ConfigMap). */
    path = write_temp("interval: 7\nlibcuda: /tmp/evil/libcuda.so.1\n");
    char *file_argv[] = {"tetris-reclaimer", "--config", path, NULL};
    ck_assert_int_lt(reclaimer_config_load(3, file_argv, &cfg, &err), 0);
    ck_assert_msg(strstr(err.msg, ":2: \"libcuda\" is refused in a settings file") != NULL, "%s",
                  err.msg);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(test_config_errors)
{
    struct reclaimer_config cfg;
    tetris_error err;
    char *a1[] = {"r", "--interval", "soon", NULL};
    ck_assert_int_lt(reclaimer_config_load(3, a1, &cfg, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "interval"));
    char *a2[] = {"r", "--bogus", NULL};
    ck_assert_int_lt(reclaimer_config_load(2, a2, &cfg, &err), 0);
    char *a3[] = {"r", "extra", NULL};
    ck_assert_int_lt(reclaimer_config_load(2, a3, &cfg, &err), 0);
    char *a9[] = {"r", "--gpu-capacity", "lots", NULL};
    ck_assert_int_lt(reclaimer_config_load(3, a9, &cfg, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "lots"));
    char *path = write_temp("interval: 5\nfrobnicate: yes\n");
    char *a4[] = {"r", "--config", path, NULL};
    ck_assert_int_lt(reclaimer_config_load(3, a4, &cfg, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, ":2:"));
    ck_assert_ptr_nonnull(strstr(err.msg, "frobnicate"));
    unlink(path);
    free(path);
    char *a5[] = {"r", "--config", "/nonexistent/x.yaml", NULL};
    ck_assert_int_lt(reclaimer_config_load(3, a5, &cfg, &err), 0);
}
END_TEST

/* The capacity is never unlimited by default: half the store's
 * filesystem (its nearest existing parent's while it does not exist). */
START_TEST(test_config_registries)
{
    struct reclaimer_config cfg;
    tetris_error err;
    char *a1[] = {"r", "--store", "/tmp", NULL};
    ck_assert_int_eq(reclaimer_config_load(3, a1, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.registries.n, 0); /* none: every pull refused */
    char *a2[] = {"r",
                  "--store",
                  "/tmp",
                  "--registries",
                  "Registry.Example:5000, 10.0.0.7:443,[::1]:5000,registry.example:5000",
                  NULL};
    ck_assert_msg(reclaimer_config_load(5, a2, &cfg, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(cfg.registries.n, 3);
    ck_assert_str_eq(cfg.registries.entries[0], "registry.example:5000");
    ck_assert(registry_listed(&cfg.registries, "REGISTRY.example", 5000));
    ck_assert(!registry_listed(&cfg.registries, "registry.example", 5001));
    ck_assert(!registry_listed(&cfg.registries, "other.example", 5000));
    ck_assert(registry_listed(&cfg.registries, "[::1]", 5000));
    /* A port is required; a host must be one. */
    char *a3[] = {"r", "--store", "/tmp", "--registries", "registry.example", NULL};
    ck_assert_int_lt(reclaimer_config_load(5, a3, &cfg, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "no port"));
    char *a4[] = {"r", "--store", "/tmp", "--registries", "bad_host:1", NULL};
    ck_assert_int_lt(reclaimer_config_load(5, a4, &cfg, &err), 0);
    char *a5[] = {"r", "--store", "/tmp", "--registries", "h:99999", NULL};
    ck_assert_int_lt(reclaimer_config_load(5, a5, &cfg, &err), 0);
    /* http:// marks a registry without TLS; https:// is the default's word. */
    char *a6[] = {"r",
                  "--store",
                  "/tmp",
                  "--registries",
                  "http://plain.example:5000,https://tls.example:443,HTTP://Plain.example:5000",
                  NULL};
    ck_assert_msg(reclaimer_config_load(5, a6, &cfg, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(cfg.registries.n, 2);
    ck_assert_str_eq(cfg.registries.entries[0], "plain.example:5000");
    ck_assert(cfg.registries.plain[0]);
    ck_assert_str_eq(cfg.registries.entries[1], "tls.example:443");
    ck_assert(!cfg.registries.plain[1]);
    char *a7[] = {"r", "--store", "/tmp", "--registries", "ftp://h:1", NULL};
    ck_assert_int_lt(reclaimer_config_load(5, a7, &cfg, &err), 0);
}
END_TEST

static bool special(int family, const char *addr)
{
    struct sockaddr_storage ss = {0};
    if (family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, addr, &a->sin_addr), 1);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, addr, &a->sin6_addr), 1);
    }
    return registry_address_special((struct sockaddr *)&ss);
}

START_TEST(test_registry_addresses)
{
    ck_assert(special(AF_INET, "127.0.0.1"));
    ck_assert(special(AF_INET, "127.9.9.9"));
    ck_assert(special(AF_INET, "169.254.169.254"));
    ck_assert(special(AF_INET, "169.254.1.1"));
    ck_assert(special(AF_INET, "0.0.0.0"));
    ck_assert(special(AF_INET, "100.100.100.200"));
    ck_assert(!special(AF_INET, "10.0.0.7"));
    ck_assert(!special(AF_INET, "93.184.216.34"));
    ck_assert(special(AF_INET6, "::1"));
    ck_assert(special(AF_INET6, "::"));
    ck_assert(special(AF_INET6, "fe80::1"));
    ck_assert(special(AF_INET6, "fd00:ec2::254"));
    ck_assert(special(AF_INET6, "::ffff:127.0.0.1"));
    ck_assert(special(AF_INET6, "::ffff:169.254.169.254"));
    ck_assert(!special(AF_INET6, "2001:db8::1"));
    ck_assert(!special(AF_INET6, "fd00:ec2::253"));

    struct reclaimer_registries list = {0};
    char resolve[OCI_RESOLVE_MAX];
    enum oci_scheme scheme;
    tetris_error err;
    /* Not listed: refused before anything is resolved. */
    ck_assert_int_eq(registry_admit(&list, "127.0.0.1", 5000, resolve, sizeof resolve, &scheme,
                                    &err),
                     -TETRIS_E_DENIED);
    /* Listed as the address itself (or localhost): the operator named it. */
    snprintf(list.entries[list.n++], RECLAIMER_REGISTRY_LEN, "127.0.0.1:5000");
    snprintf(list.entries[list.n++], RECLAIMER_REGISTRY_LEN, "localhost:5000");
    snprintf(list.entries[list.n++], RECLAIMER_REGISTRY_LEN, "169.254.169.254:80");
    list.plain[list.n] = true;
    snprintf(list.entries[list.n++], RECLAIMER_REGISTRY_LEN, "127.0.0.1:5080");
    snprintf(list.entries[list.n++], RECLAIMER_REGISTRY_LEN, "10.0.0.7:443");
    ck_assert_msg(registry_admit(&list, "127.0.0.1", 5000, resolve, sizeof resolve, &scheme,
                                 &err) == 0,
                  "%s", err.msg);
    ck_assert_str_eq(resolve, ""); /* an address needs no pinning */
    /* Loopback: TLS first, plain HTTP if it does not speak TLS (docker's
     * rule); http:// listed: plain; anything else: TLS only. */
    ck_assert_int_eq(scheme, OCI_SCHEME_HTTPS_OR_HTTP);
    ck_assert_int_eq(registry_admit(&list, "127.0.0.1", 5080, resolve, sizeof resolve, &scheme,
                                    &err),
                     0);
    ck_assert_int_eq(scheme, OCI_SCHEME_HTTP);
    ck_assert_int_eq(registry_admit(&list, "10.0.0.7", 443, resolve, sizeof resolve, &scheme, &err),
                     0);
    ck_assert_int_eq(scheme, OCI_SCHEME_HTTPS);
    ck_assert_int_eq(registry_admit(&list, "169.254.169.254", 80, resolve, sizeof resolve, &scheme,
                                    &err),
                     0);
    ck_assert_int_eq(scheme, OCI_SCHEME_HTTPS);
    ck_assert_msg(registry_admit(&list, "localhost", 5000, resolve, sizeof resolve, &scheme,
                                 &err) == 0,
                  "%s", err.msg);
    ck_assert_int_eq(scheme, OCI_SCHEME_HTTPS_OR_HTTP);
    /* A name is pinned to the address checked. */
    ck_assert(strncmp(resolve, "localhost:5000:", 15) == 0);
    ck_assert_int_eq(registry_admit(&list, "127.0.0.1", 5001, resolve, sizeof resolve, &scheme,
                                    &err),
                     -TETRIS_E_DENIED);
}
END_TEST

START_TEST(test_config_budgets)
{
    struct reclaimer_config cfg;
    tetris_error err;
    struct statvfs vfs;
    ck_assert_int_eq(statvfs("/tmp", &vfs), 0);
    uint64_t half = (uint64_t)((double)vfs.f_blocks * (double)vfs.f_frsize / 2);
    char *a1[] = {"r", "--store", "/tmp/not/yet/a/store", NULL};
    ck_assert_int_eq(reclaimer_config_load(3, a1, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.capacity_bytes, half);
    ck_assert_uint_eq(cfg.tenant_capacity_bytes, 0);
    ck_assert_uint_eq(cfg.max_conns_per_uid, 192); /* 3/4 of 256 */
    ck_assert_uint_eq(cfg.max_conns_per_pid, 8);
    ck_assert(cfg.ingest_timeout_s == 120);
    /* Claims in flight: a quarter of the capacity per store, half that per
     * uid; the shared store has the tenants' quota (none). */
    ck_assert_uint_eq(cfg.max_unverified_bytes, (uint64_t)((double)half * 25 / 100));
    ck_assert_uint_eq(cfg.max_unverified_uid_bytes, cfg.max_unverified_bytes / 2);
    ck_assert_uint_eq(cfg.shared_capacity_bytes, 0);
    char *path = write_temp("capacity: 10%\ntenant_capacity: 25%\nmax_request_bytes: 1Mi\n"
                            "ingest_timeout: 5s\nmax_connections_per_uid: 3\n");
    char *a2[] = {"r", "--store", "/tmp", "--config", path, "--max-connections-per-pid", "2", NULL};
    ck_assert_int_eq(reclaimer_config_load(7, a2, &cfg, &err), 0);
    uint64_t tenth = (uint64_t)((double)vfs.f_blocks * (double)vfs.f_frsize / 10);
    ck_assert_uint_eq(cfg.capacity_bytes, tenth);
    ck_assert_uint_eq(cfg.tenant_capacity_bytes, (uint64_t)((double)tenth / 4));
    ck_assert_uint_eq(cfg.max_request_bytes, 1u << 20);
    ck_assert(cfg.ingest_timeout_s == 5);
    ck_assert_uint_eq(cfg.max_conns_per_uid, 3);
    ck_assert_uint_eq(cfg.max_conns_per_pid, 2);
    unlink(path);
    free(path);
    ck_assert_uint_eq(cfg.shared_capacity_bytes, cfg.tenant_capacity_bytes);
    char *a3[] = {"r", "--capacity", "0", "--tenant-capacity", "1Gi", NULL};
    ck_assert_int_eq(reclaimer_config_load(5, a3, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.capacity_bytes, 0); /* unlimited, when asked for */
    ck_assert_uint_eq(cfg.tenant_capacity_bytes, 1ull << 30);
    ck_assert_uint_eq(cfg.max_unverified_bytes, 0); /* no capacity, no bound */
    char *a5[] = {"r",
                  "--capacity=64Mi",
                  "--tenant-capacity=8Mi",
                  "--shared-capacity=50%",
                  "--max-unverified-bytes=1Mi",
                  "--max-unverified-bytes-per-uid=10%",
                  NULL};
    ck_assert_int_eq(reclaimer_config_load(6, a5, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.shared_capacity_bytes, 32u << 20);
    ck_assert_uint_eq(cfg.max_unverified_bytes, 1u << 20);
    ck_assert_uint_eq(cfg.max_unverified_uid_bytes, (uint64_t)((double)(64u << 20) / 10));
    char *a6[] = {"r", "--tenant-capacity", "8Mi", "--shared-capacity", "0", NULL};
    ck_assert_int_eq(reclaimer_config_load(5, a6, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.shared_capacity_bytes, 0); /* none, when asked for */
    static const char *bad[] = {"0%", "101%", "x%", "%", "-5%"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *a4[] = {"r", "--capacity", (char *)bad[i], NULL};
        ck_assert_msg(reclaimer_config_load(3, a4, &cfg, &err) < 0, "%s accepted", bad[i]);
    }
}
END_TEST

START_TEST(test_config_tenants)
{
    struct reclaimer_config cfg;
    tetris_error err;
    char *a1[] = {"r", NULL};
    ck_assert_int_eq(reclaimer_config_load(1, a1, &cfg, &err), 0);
    ck_assert(!cfg.no_tenants);
    ck_assert_uint_eq(cfg.max_tenants, 64);
    char *a2[] = {"r", "--no-tenants", "--max-tenants", "3", NULL};
    ck_assert_int_eq(reclaimer_config_load(4, a2, &cfg, &err), 0);
    ck_assert(cfg.no_tenants);
    ck_assert_uint_eq(cfg.max_tenants, 3);
    char *a3[] = {"r", "--max-tenants", "257", NULL};
    ck_assert_int_lt(reclaimer_config_load(3, a3, &cfg, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "tenants"));
    char *a4[] = {"r", "--max-tenants", "0", NULL};
    ck_assert_int_lt(reclaimer_config_load(3, a4, &cfg, &err), 0);
    /* The served tenants are the configured list only; none by default. */
    ck_assert_int_eq(reclaimer_config_load(1, a1, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.n_tenants, 0);
    char *a5[] = {"r", "--tenants", "alpha,beta,,alpha,team-1.x", NULL};
    ck_assert_int_eq(reclaimer_config_load(3, a5, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.n_tenants, 3);
    ck_assert_str_eq(cfg.tenants[0], "alpha");
    ck_assert_str_eq(cfg.tenants[1], "beta");
    ck_assert_str_eq(cfg.tenants[2], "team-1.x");
    char *a6[] = {"r", "--tenants", "a,b,c", "--max-tenants", "2", NULL};
    ck_assert_int_lt(reclaimer_config_load(5, a6, &cfg, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "--max-tenants"));
    char too_long[80];
    memset(too_long, 'a', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    const char *const bad[] = {"Alpha", "../x", "a/b", ".hidden", "a..b", "a b", too_long};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *a7[] = {"r", "--tenants", (char *)bad[i], NULL};
        ck_assert_msg(reclaimer_config_load(3, a7, &cfg, &err) < 0, "accepted %s", bad[i]);
        ck_assert_ptr_nonnull(strstr(err.msg, "tenant"));
    }
}
END_TEST

/* --tenant-uids: who may use which store's socket. */
START_TEST(test_config_tenant_uids)
{
    struct reclaimer_config cfg;
    tetris_error err;
    char *a1[] = {"r", "--tenant-uids", "alpha=1000,beta=2000-2099,alpha=3000", NULL};
    ck_assert_int_eq(reclaimer_config_load(3, a1, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.n_tenant_uids, 3);
    ck_assert(reclaimer_peer_allowed(&cfg, "alpha", 1000));
    ck_assert(reclaimer_peer_allowed(&cfg, "alpha", 3000));
    ck_assert(reclaimer_peer_allowed(&cfg, "beta", 2099));
    ck_assert(!reclaimer_peer_allowed(&cfg, "beta", 1000));  /* alpha's uid */
    ck_assert(!reclaimer_peer_allowed(&cfg, "alpha", 0));    /* unbound, bound tenant */
    ck_assert(!reclaimer_peer_allowed(&cfg, "", 2000));      /* beta's, shared socket */
    ck_assert(reclaimer_peer_allowed(&cfg, "", 65534));      /* unbound, shared */
    ck_assert(reclaimer_peer_allowed(&cfg, "gamma", 65534)); /* unbound, unbound tenant */
    ck_assert(!reclaimer_peer_allowed(&cfg, "gamma", 1000)); /* alpha's, elsewhere */
    char *a2[] = {"r", NULL};
    ck_assert_int_eq(reclaimer_config_load(1, a2, &cfg, &err), 0);
    ck_assert_uint_eq(cfg.n_tenant_uids, 0);
    ck_assert(reclaimer_peer_allowed(&cfg, "alpha", 0));
    static const char *const bad[] = {"alpha", "alpha=",   "Alpha=1", "alpha=2-1",
                                      "a=x",   "alpha=1-", "../x=1",  "alpha=99999999999"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *a3[] = {"r", "--tenant-uids", (char *)bad[i], NULL};
        ck_assert_msg(reclaimer_config_load(3, a3, &cfg, &err) < 0, "accepted %s", bad[i]);
    }
}
END_TEST

static tensor_digest digest_of(uint32_t i)
{
    tensor_digest d;
    memset(&d, 0, sizeof(d));
    /* Spread like a hash, with collisions in the low bits for some keys. */
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    if (i % 7 == 0)
        h &= ~0xfffull;
    memcpy(d.bytes, &h, sizeof(h));
    memcpy(d.bytes + 8, &i, sizeof(i));
    return d;
}

START_TEST(test_index_insert_remove)
{
    tensor_index *ix;
    tetris_error err;
    ck_assert_int_eq(tensor_index_new(&ix, &err), 0);
    const uint32_t n = 20000;
    for (uint32_t i = 0; i < n; i++) {
        tensor_digest d = digest_of(i);
        struct index_entry *e;
        bool created;
        ck_assert_int_eq(tensor_index_upsert(ix, &d, &e, &created, &err), 0);
        ck_assert(created);
        e->bytes = i;
    }
    ck_assert_uint_eq(tensor_index_count(ix), n);
    for (uint32_t i = 0; i < n; i += 2) {
        tensor_digest d = digest_of(i);
        tensor_index_remove(ix, &d);
    }
    ck_assert_uint_eq(tensor_index_count(ix), n / 2);
    for (uint32_t i = 0; i < n; i++) {
        tensor_digest d = digest_of(i);
        struct index_entry *e = tensor_index_find(ix, &d);
        if (i % 2 == 0) {
            ck_assert_ptr_null(e);
        } else {
            ck_assert_ptr_nonnull(e);
            ck_assert_uint_eq(e->bytes, i);
        }
    }
    size_t seen = 0, c = 0;
    while (tensor_index_next(ix, &c) != NULL)
        seen++;
    ck_assert_uint_eq(seen, n / 2);
    tensor_index_free(ix);
}
END_TEST

START_TEST(test_index_state_file)
{
    tensor_index *ix;
    tetris_error err;
    ck_assert_int_eq(tensor_index_new(&ix, &err), 0);
    for (uint32_t i = 0; i < 100; i++) {
        tensor_digest d = digest_of(i);
        struct index_entry *e;
        ck_assert_int_eq(tensor_index_upsert(ix, &d, &e, NULL, &err), 0);
        e->last_ref_s = i % 3 ? 1000 + i : 0;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/reclaimer.state", unit_scratch_dir("reclaimer-state"));
    ck_assert_int_eq(tensor_index_save(ix, path, &err), 0);
    tensor_index_free(ix);

    ck_assert_int_eq(tensor_index_new(&ix, &err), 0);
    ck_assert_int_eq(tensor_index_load(ix, path, &err), 0);
    for (uint32_t i = 0; i < 100; i++) {
        tensor_digest d = digest_of(i);
        struct index_entry *e = tensor_index_find(ix, &d);
        if (i % 3) {
            ck_assert_ptr_nonnull(e);
            ck_assert_int_eq(e->last_ref_s, 1000 + i);
        } else {
            ck_assert_ptr_null(e);
        }
    }
    tensor_index_free(ix);

    unit_write_text(path, "not a digest 12\n");
    ck_assert_int_eq(tensor_index_new(&ix, &err), 0);
    ck_assert_int_eq(tensor_index_load(ix, path, &err), -TETRIS_E_FORMAT);
    ck_assert_int_eq(tensor_index_load(ix, "/nonexistent/state", &err), 0);
    tensor_index_free(ix);
    unlink(path);
}
END_TEST

/* The reclaim rule: the oldest cold tensor first (ties in the callers'
 * order), freed once unused for the keep-alive, evicted while a bounded
 * store is over its target, kept otherwise. */
START_TEST(test_reclaim_rule)
{
    struct cold_tensor cold[4] = {{.last_use_s = 50, .slot = 0},
                                  {.last_use_s = 10, .slot = 1},
                                  {.last_use_s = 50, .slot = 2},
                                  {.last_use_s = 30, .slot = 3}};
    reclaim_sort_cold(cold, 4);
    size_t want[4] = {1, 3, 0, 2};
    for (size_t i = 0; i < 4; i++)
        ck_assert_uint_eq(cold[i].slot, want[i]);
    ck_assert_int_eq(reclaim_judge(310, 10, 300, false, 1000, 0), RECLAIM_EXPIRED);
    ck_assert_int_eq(reclaim_judge(309, 10, 300, false, 1000, 0), RECLAIM_KEEP);
    ck_assert_int_eq(reclaim_judge(20, 10, 300, true, 101, 100), RECLAIM_EVICT);
    ck_assert_int_eq(reclaim_judge(20, 10, 300, true, 100, 100), RECLAIM_KEEP);
    ck_assert_int_eq(reclaim_judge(310, 10, 300, true, 50, 100), RECLAIM_EXPIRED);
    ck_assert_int_eq(reclaim_judge(10, 10, 0, false, 0, 0), RECLAIM_EXPIRED);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "units", 0);
    tcase_add_test(tc, test_parse_bytes);
    tcase_add_test(tc, test_config_budgets);
    tcase_add_test(tc, test_config_registries);
    tcase_add_test(tc, test_registry_addresses);
    tcase_add_test(tc, test_parse_seconds);
    tcase_add_test(tc, test_yaml_nested);
    tcase_add_test(tc, test_yaml_bad);
    tcase_add_test(tc, test_config_precedence);
    tcase_add_test(tc, test_config_errors);
    tcase_add_test(tc, test_config_tenants);
    tcase_add_test(tc, test_config_tenant_uids);
    tcase_add_test(tc, test_index_insert_remove);
    tcase_add_test(tc, test_index_state_file);
    tcase_add_test(tc, test_reclaim_rule);
}

UNIT_MAIN("reclaimer")
