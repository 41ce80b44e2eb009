/* test_tenant_map.c - the CSI tenant map (reclaimer/csi/tenant_map.h):
 * what a line may say, which rule a pod's identity gets (the most
 * specific), that a pod no rule matches gets none, that one bad line
 * refuses the whole file with the line named; and the file followed: a
 * rewrite, a rename over it and the kubelet's swap of a link are each
 * read once, a text that does not parse or a file that is gone is refused
 * once and the map before it stays. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reclaimer/csi/tenant_map.h"
#include "tests/lib/unit.h"

static int parse(const char *text, tenant_map **m, tetris_error *err)
{
    return tenant_map_parse(text, strlen(text), "map", m, err);
}

/* The store a pod gets: "shared", the tenant, or "refused". */
static const char *store_of(const tenant_map *m, const char *ns, const char *sa)
{
    const char *tenant = NULL;
    if (!tenant_map_lookup(m, ns, sa, &tenant))
        return "refused";
    return tenant != NULL ? tenant : "shared";
}

START_TEST(test_most_specific_rule)
{
    const char *text = "# tenants of the cluster\n"
                       "\n"
                       "team-a  *  tenant:alpha   # every pod of team-a\n"
                       "team-b\tinference\ttenant:beta\r\n"
                       "team-b  *  shared\n"
                       "  team-c  builder.sa-1  tenant:gamma.2";
    tenant_map *m = NULL;
    tetris_error err;
    ck_assert_int_eq(parse(text, &m, &err), 0);
    ck_assert_uint_eq(tenant_map_rules(m), 4);
    ck_assert_str_eq(store_of(m, "team-a", "default"), "alpha");
    ck_assert_str_eq(store_of(m, "team-a", ""), "alpha");
    ck_assert_str_eq(store_of(m, "team-b", "inference"), "beta");
    ck_assert_str_eq(store_of(m, "team-b", "default"), "shared");
    ck_assert_str_eq(store_of(m, "team-c", "builder.sa-1"), "gamma.2");
    /* No rule, no catch-all: refused; so is a pod the kubelet named not. */
    ck_assert_str_eq(store_of(m, "team-c", "default"), "refused");
    ck_assert_str_eq(store_of(m, "other", "default"), "refused");
    ck_assert_str_eq(store_of(m, "", ""), "refused");
    /* A namespace is matched whole: no prefixes, no case folding. */
    ck_assert_str_eq(store_of(m, "team-a2", "default"), "refused");
    ck_assert_str_eq(store_of(m, "Team-a", "default"), "refused");
    /* "*" in the identity is a name like any other, not a wildcard. */
    ck_assert_str_eq(store_of(m, "*", "*"), "refused");
    tenant_map_free(m);
}
END_TEST

START_TEST(test_catch_all)
{
    tenant_map *m = NULL;
    tetris_error err;
    ck_assert_int_eq(parse("team-a * tenant:alpha\n* * shared\n", &m, &err), 0);
    ck_assert_str_eq(store_of(m, "team-a", "x"), "alpha");
    ck_assert_str_eq(store_of(m, "other", "x"), "shared");
    ck_assert_str_eq(store_of(m, "", ""), "shared");
    tenant_map_free(m);
    /* The catch-all may be a tenant's too. */
    ck_assert_int_eq(parse("* * tenant:everyone\n", &m, &err), 0);
    ck_assert_str_eq(store_of(m, "x", "y"), "everyone");
    tenant_map_free(m);
    /* No rules at all: every pod is refused. */
    ck_assert_int_eq(parse("# nothing mapped\n\n", &m, &err), 0);
    ck_assert_uint_eq(tenant_map_rules(m), 0);
    ck_assert_str_eq(store_of(m, "team-a", "default"), "refused");
    tenant_map_free(m);
}
END_TEST

/* Each bad file is refused as a format error naming its line. */
START_TEST(test_bad_maps)
{
    static const struct {
        const char *text;
        const char *says;
    } bad[] = {
        {"team-a * tenant:alpha\nteam-b *\n", "map:2: want NAMESPACE SERVICE-ACCOUNT STORE"},
        {"team-a\n", "got 1 field"},
        {"team-a * tenant:alpha extra\n", "more than"},
        {"team-a * alpha\n", "neither \"shared\" nor \"tenant:NAME\""},
        {"team-a * tenant:\n", "tenant name must be"},
        {"team-a * tenant:../../etc\n", "may only contain"},
        {"team-a * tenant:..\n", "not a plain name"},
        {"team-a * tenant:Alpha\n", "may only contain"},
        {"team-a * tenant:a/b\n", "may only contain"},
        {"Team-A * shared\n", "namespace 'Team-A'"},
        {"-team * shared\n", "namespace '-team'"},
        {"team- * shared\n", "namespace 'team-'"},
        {"team.a * shared\n", "namespace 'team.a'"},
        {"team-a sa_1 shared\n", "service account 'sa_1'"},
        {"team-a .sa shared\n", "service account '.sa'"},
        {"team-a sa..x shared\n", "service account 'sa..x'"},
        {"team-a sa.-x shared\n", "service account 'sa.-x'"},
        {"* default shared\n", "any namespace"},
        {"te*m * shared\n", "namespace 'te*m'"},
        {"team-a * shared\nteam-a * tenant:alpha\n", "map:2: a second rule"},
        {"* * shared\n\n* * tenant:x\n", "map:3: a second rule"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa * shared\n",
         "namespace 'aaaa"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tenant_map *m = NULL;
        tetris_error err;
        ck_assert_int_eq(parse(bad[i].text, &m, &err), -TETRIS_E_FORMAT);
        ck_assert_msg(strstr(err.msg, bad[i].says) != NULL, "%zu: %s", i, err.msg);
        ck_assert_ptr_null(m);
    }
}
END_TEST

START_TEST(test_bounds)
{
    tenant_map *m = NULL;
    tetris_error err;
    /* The longest names Kubernetes allows are read. */
    char ns[64], sa[254], line[TENANT_MAP_LINE_MAX + 64];
    memset(ns, 'n', sizeof(ns) - 1);
    ns[sizeof(ns) - 1] = '\0';
    memset(sa, 's', sizeof(sa) - 1);
    sa[sizeof(sa) - 1] = '\0';
    snprintf(line, sizeof(line), "%s %s shared\n", ns, sa);
    ck_assert_int_eq(parse(line, &m, &err), 0);
    ck_assert_str_eq(store_of(m, ns, sa), "shared");
    tenant_map_free(m);
    /* One character more is not a name. */
    snprintf(line, sizeof(line), "%s %ss shared\n", ns, sa);
    ck_assert_int_eq(parse(line, &m, &err), -TETRIS_E_FORMAT);
    /* A line past the limit, even a comment. */
    memset(line, ' ', sizeof(line) - 1);
    line[0] = '#';
    line[sizeof(line) - 1] = '\0';
    ck_assert_int_eq(parse(line, &m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "longer than"));
    /* A NUL byte. */
    static const char with_nul[] = "team-a * shared\0\n";
    ck_assert_int_eq(tenant_map_parse(with_nul, sizeof(with_nul) - 1, "map", &m, &err),
                     -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "NUL"));
    /* The most rules, and one more. */
    size_t cap = (TENANT_MAP_MAX_RULES + 1) * 24;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    size_t len = 0;
    for (int i = 0; i < TENANT_MAP_MAX_RULES; i++)
        len += (size_t)snprintf(text + len, cap - len, "ns-%d * shared\n", i);
    ck_assert_int_eq(tenant_map_parse(text, len, "map", &m, &err), 0);
    ck_assert_uint_eq(tenant_map_rules(m), TENANT_MAP_MAX_RULES);
    tenant_map_free(m);
    len += (size_t)snprintf(text + len, cap - len, "one-more * shared\n");
    ck_assert_int_eq(tenant_map_parse(text, len, "map", &m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than"));
    free(text);
}
END_TEST

START_TEST(test_read_file)
{
    const char *dir = unit_scratch_dir("tenant-map");
    char path[512];
    tenant_map *m = NULL;
    tetris_error err;
    snprintf(path, sizeof(path), "%s/absent", dir);
    ck_assert_int_eq(tenant_map_read(path, &m, &err), -TETRIS_E_NOTFOUND);
    snprintf(path, sizeof(path), "%s/map", dir);
    unit_write_text(path, "team-a * tenant:alpha\nteam-b\n");
    ck_assert_int_eq(tenant_map_read(path, &m, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    unit_write_text(path, "team-a * tenant:alpha\n");
    ck_assert_int_eq(tenant_map_read(path, &m, &err), 0);
    ck_assert_str_eq(store_of(m, "team-a", "default"), "alpha");
    tenant_map_free(m);
}
END_TEST

/* What the followed map says of team-a's and team-b's default pods. */
static const char *stores_of(const tenant_map_file *f, char *buf, size_t size)
{
    const tenant_map *m = tenant_map_file_map(f);
    snprintf(buf, size, "%s %s", store_of(m, "team-a", "default"),
             store_of(m, "team-b", "default"));
    return buf;
}

START_TEST(test_follow_file)
{
    const char *dir = unit_scratch_dir("tenant-map-follow");
    char path[512], data[512], v1[512], v2[512], tmp[512], file[600], buf[64];
    tenant_map_file *f = NULL;
    tetris_error err;
    /* The kubelet's layout: map -> ..data/map, ..data -> v1. */
    snprintf(path, sizeof(path), "%s/map", dir);
    snprintf(data, sizeof(data), "%s/..data", dir);
    snprintf(v1, sizeof(v1), "%s/v1", dir);
    snprintf(v2, sizeof(v2), "%s/v2", dir);
    snprintf(tmp, sizeof(tmp), "%s/..data_tmp", dir);
    ck_assert_int_eq(mkdir(v1, 0700), 0);
    ck_assert_int_eq(mkdir(v2, 0700), 0);
    snprintf(file, sizeof(file), "%s/map", v1);
    unit_write_text(file, "team-a * tenant:alpha\n");
    ck_assert_int_eq(symlink("v1", data), 0);
    ck_assert_int_eq(symlink("..data/map", path), 0);
    ck_assert_int_eq(tenant_map_file_open(path, &f, &err), 0);
    ck_assert_str_eq(tenant_map_file_path(f), path);
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "alpha refused");
    /* Nothing changed: nothing read. */
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 0);

    /* The kubelet's update: the new file beside, the link swapped by rename. */
    snprintf(file, sizeof(file), "%s/map", v2);
    unit_write_text(file, "team-a * tenant:alpha\nteam-b * tenant:beta\n");
    ck_assert_int_eq(symlink("v2", tmp), 0);
    ck_assert_int_eq(rename(tmp, data), 0);
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 1);
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "alpha beta");
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 0);

    /* A text that does not parse: refused once, with the line; the map
     * before it stays, also at the next refresh. */
    ck_assert_int_eq(unlink(path), 0);
    unit_write_text(path, "team-a * tenant:alpha\nteam-b beta\n");
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), -TETRIS_E_FORMAT);
    ck_assert_ptr_nonnull(strstr(err.msg, ":2: want NAMESPACE SERVICE-ACCOUNT STORE"));
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "alpha beta");
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 0);
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "alpha beta");

    /* Rewritten in place, fixed (another size): read. */
    unit_write_text(path, "team-a * shared\n* * tenant:gamma\n");
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 1);
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "shared gamma");

    /* Gone: refused once, the map before it stays; back: read. */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), -TETRIS_E_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err.msg, path));
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 0);
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "shared gamma");
    unit_write_text(path, "team-b * shared\n");
    ck_assert_int_eq(tenant_map_file_refresh(f, &err), 1);
    ck_assert_str_eq(stores_of(f, buf, sizeof(buf)), "refused shared");
    tenant_map_file_free(f);

    /* At open, a map that does not parse, or no file, is the caller's error. */
    unit_write_text(path, "team-b\n");
    ck_assert_int_eq(tenant_map_file_open(path, &f, &err), -TETRIS_E_FORMAT);
    snprintf(file, sizeof(file), "%s/absent", dir);
    ck_assert_int_eq(tenant_map_file_open(file, &f, &err), -TETRIS_E_NOTFOUND);
}
END_TEST

static void unit_tests(Suite *s)
{
    TCase *tc = unit_tcase(s, "tenant_map", 0);
    tcase_add_test(tc, test_most_specific_rule);
    tcase_add_test(tc, test_catch_all);
    tcase_add_test(tc, test_bad_maps);
    tcase_add_test(tc, test_bounds);
    tcase_add_test(tc, test_read_file);
    tcase_add_test(tc, test_follow_file);
}

UNIT_MAIN("tenant_map")
