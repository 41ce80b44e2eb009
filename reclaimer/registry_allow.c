/* registry_allow.c - which registries the node daemon may contact for a
 * pull, and at which address (reclaimer/pull.h).
 *
 * The daemon is root on the node and a pod names the reference, so a
 * reference is a request to make HTTP calls from the node's network:
 * only the operator's list (--registries) is ever reached. A listed name
 * is resolved once per request and the request pinned to that address
 * (CURLOPT_RESOLVE), so a name that resolves to a listed registry when it
 * is checked cannot resolve elsewhere when it is connected (DNS
 * rebinding). An address no pod should make the daemon reach (loopback,
 * link-local, a cloud's metadata service, unspecified) is refused unless
 * the operator named it: the listed host is that address itself, or
 * "localhost".
 *
 * The list also says how a registry is reached: over TLS, unless its
 * entry is "http://HOST:PORT" (the operator's word that it has none); a
 * loopback registry the operator named is tried over TLS and may fall
 * back to plain HTTP, as docker treats localhost. A token server and a
 * blob store are hosts like any other: listed, or never reached. */
#include "reclaimer/pull.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* The index of host:port on the list, or -1. */
static int listed_at(const struct reclaimer_registries *list, const char *host, unsigned port)
{
    char want[RECLAIMER_REGISTRY_LEN];
    int n = snprintf(want, sizeof(want), "%s:%u", host, port);
    if (n < 0 || (size_t)n >= sizeof(want))
        return -1;
    for (char *c = want; *c != '\0'; c++)
        *c = (char)tolower((unsigned char)*c);
    for (size_t i = 0; i < list->n; i++)
        if (strcmp(list->entries[i], want) == 0)
            return (int)i;
    return -1;
}

bool registry_listed(const struct reclaimer_registries *list, const char *host, unsigned port)
{
    return listed_at(list, host, port) >= 0;
}

/* Loopback, link-local, unspecified, or a metadata service's address. */
static bool special_v4(const struct in_addr *a)
{
    uint32_t x = ntohl(a->s_addr);
    return (x >> 24) == 127 || (x >> 24) == 0 || (x >> 16) == ((169u << 8) | 254u) ||
           x == 0x646464c8u; /* 100.100.100.200, a metadata service too */
}

static bool special_v6(const struct in6_addr *a)
{
    static const uint8_t ec2_metadata[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0,    0,
                                             0,    0,    0,    0,    0, 0, 0x02, 0x54};
    if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_LINKLOCAL(a) ||
        memcmp(a->s6_addr, ec2_metadata, sizeof(ec2_metadata)) == 0)
        return true;
    if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4COMPAT(a)) {
        struct in_addr v4;
        memcpy(&v4, a->s6_addr + 12, 4);
        return special_v4(&v4);
    }
    return false;
}

bool registry_address_special(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return special_v4(&((const struct sockaddr_in *)(const void *)sa)->sin_addr);
    if (sa->sa_family == AF_INET6)
        return special_v6(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
    return true;
}

/* 127.0.0.0/8, ::1, or an IPv4 loopback address mapped into IPv6. */
static bool loopback_address(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) ==
               127;
    if (sa->sa_family != AF_INET6)
        return false;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

int registry_admit(const struct reclaimer_registries *list, const char *host, unsigned port,
                   char *resolve, size_t cap, enum oci_scheme *scheme, tetris_error *err)
{
    resolve[0] = '\0';
    int at = listed_at(list, host, port);
    if (at < 0)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "registry %s:%u is not one this node may reach (the daemon's "
                           "--registries)",
                           host, port);
    /* The name as getaddrinfo takes it: an IPv6 address without brackets. */
    char name[OCI_HOST_MAX + 1];
    size_t len = strlen(host);
    bool bracketed = len >= 2 && host[0] == '[' && host[len - 1] == ']';
    snprintf(name, sizeof(name), "%.*s", (int)(bracketed ? len - 2 : len), host + bracketed);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(name, NULL, &hints, &ai);
    if (g != 0)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "registry %s:%u: cannot resolve: %s", host,
                           port, gai_strerror(g));
    char addr[INET6_ADDRSTRLEN];
    const void *raw = ai->ai_family == AF_INET6
                          ? (const void *)&((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr
                          : (const void *)&((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr;
    bool special = registry_address_special(ai->ai_addr);
    bool loopback = loopback_address(ai->ai_addr);
    bool six = ai->ai_family == AF_INET6;
    bool printed = inet_ntop(ai->ai_family, raw, addr, sizeof(addr)) != NULL;
    freeaddrinfo(ai);
    if (!printed)
        return tetris_fail(err, TETRIS_E_UNAVAILABLE, 0, "registry %s:%u: unusable address", host,
                           port);
    /* The operator named this address when the listed host is an address
     * (it resolves to itself) or localhost. */
    struct in6_addr probe;
    bool literal = inet_pton(AF_INET, name, &probe) == 1 || inet_pton(AF_INET6, name, &probe) == 1;
    bool named = literal || strcasecmp(name, "localhost") == 0;
    if (special && !named)
        return tetris_fail(err, TETRIS_E_DENIED, 0,
                           "registry %s:%u resolves to %s, a loopback, link-local or metadata "
                           "address: list that address itself to allow it",
                           host, port, addr);
    /* TLS unless the operator wrote http://; a loopback registry the
     * operator named may be plain HTTP too (docker's rule for localhost). */
    *scheme = list->plain[at]     ? OCI_SCHEME_HTTP
              : loopback && named ? OCI_SCHEME_HTTPS_OR_HTTP
                                  : OCI_SCHEME_HTTPS;
    if (literal)
        return 0; /* nothing to resolve, nothing to pin */
    int n = snprintf(resolve, cap, six ? "%s:%u:[%s]" : "%s:%u:%s", name, port, addr);
    if (n < 0 || (size_t)n >= cap)
        return tetris_fail(err, TETRIS_E_INVAL, 0, "registry %s:%u: name too long", host, port);
    return 0;
}
