/* gateway_counter.c - autoscaler-gateway-counter: serves the one metric of
 * the OpenFaaS gateway the autoscaler reads, for tests where no gateway can
 * run: `gateway_function_invocation_total{function_name=NAME}` growing at a
 * fixed rate per function, on /metrics, for a real Prometheus to scrape.
 *
 *   autoscaler-gateway-counter NAME=RPS... [--listen ADDR:PORT]
 *
 * Prints `port=N` on stdout once listening; runs until SIGTERM/SIGINT.
 * Exit status: 0 stopped by a signal (or --help, --version), 2 bad usage, 1
 * cannot listen. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/httpserver.h"
#include "common/log.h"
#include "common/prom.h"

typedef struct counter {
    const char *name;
    double rps;
} counter;

typedef struct gateway {
    counter *counters;
    int n;
    double start_ms;
} gateway;

static void handle_metrics(void *ctx, const http_request *req, http_response *resp)
{
    (void)req;
    static const char name[] = "gateway_function_invocation_total";
    gateway *g = ctx;
    double t = (clock_now_ms() - g->start_ms) / 1e3;
    textbuf text = {0};
    prom_header(&text, name, "counter", "Function metrics");
    for (int i = 0; i < g->n; i++)
        prom_sample_double(&text, name,
                           (prom_label[]){{"code", "200"}, {"function_name", g->counters[i].name}},
                           2, "%.0f", floor(g->counters[i].rps * t));
    size_t len;
    char *body = textbuf_take(&text, &len);
    if (body == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    http_response_take_body(resp, 200, "text/plain; version=0.0.4", body, len);
}

static const char usage_text[] =
    "usage: autoscaler-gateway-counter NAME=RPS... [--listen ADDR:PORT]\n"
    "\n"
    "Serves gateway_function_invocation_total{function_name=NAME} on /metrics,\n"
    "growing by RPS per second for each NAME, the one OpenFaaS gateway metric\n"
    "the autoscaler reads. Prints port=N on stdout once listening.\n"
    "\n"
    "  --listen ADDR:PORT   where to listen (default 127.0.0.1:0, any free port)\n"
    "  -h, --help           this text\n"
    "  --version            the version\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM/SIGINT; 1 cannot listen; 2 bad usage.\n";

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    log_init(argv[0]);
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("autoscaler-gateway-counter %s\n", TETRIS_VERSION);
        return 0;
    }
    const char *listen = "127.0.0.1:0";
    gateway g = {.counters = calloc((size_t)argc, sizeof(counter))};
    if (g.counters == NULL)
        return 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen = argv[++i];
            continue;
        }
        char *eq = strchr(argv[i], '=');
        char *end = NULL;
        double rps = eq ? strtod(eq + 1, &end) : -1;
        if (eq == NULL || eq == argv[i] || *end != '\0' || !(rps >= 0)) {
            fprintf(stderr, "autoscaler-gateway-counter: bad argument '%s'\n"
                            "Try 'autoscaler-gateway-counter --help'.\n", argv[i]);
            free(g.counters);
            return 2;
        }
        *eq = '\0';
        g.counters[g.n++] = (counter){.name = argv[i], .rps = rps};
    }
    g.start_ms = clock_now_ms();
    struct http_server_options o;
    http_server_options_init(&o);
    o.listen = listen;
    http_server *srv = NULL;
    tetris_error err = {0};
    if (http_server_new(&o, &srv, &err) < 0 ||
        http_server_route(srv, "GET", "/metrics", handle_metrics, &g, &err) < 0 ||
        http_server_start(srv, &err) < 0) {
        fprintf(stderr, "autoscaler-gateway-counter: %s\n", err.msg);
        http_server_free(srv);
        return 1;
    }
    printf("port=%u\n", http_server_port(srv));
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    while (!stop)
        pause();
    http_server_free(srv);
    free(g.counters);
    return 0;
}
