/* kubeconfig.h - where the apiserver is and how to authenticate to it: from
 * a kubeconfig file (its current-context) or from in-cluster service-account
 * files. Used by kube.c; separate so it can be tested on its own. */
#ifndef TETRIS_KUBECONFIG_H
#define TETRIS_KUBECONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

typedef struct kube_blob {
    char *data; /* PEM bytes, NUL-terminated; NULL when absent */
    size_t len;
} kube_blob;

typedef struct kube_config {
    char *server;     /* "https://host:port" (http:// accepted for tests) */
    char *token;      /* static bearer token, or NULL */
    char *token_file; /* bearer token re-read when the file changes, or NULL */
    kube_blob ca;     /* certificate authority; system CAs when absent */
    kube_blob cert;   /* client certificate */
    kube_blob key;    /* client key */
    bool insecure;    /* insecure-skip-tls-verify */
    char *ns;         /* namespace of the context or service account */
} kube_config;

/* Parses a kubeconfig file (YAML or JSON) and resolves its current-context.
 * Relative file paths in it are relative to the file's directory. */
int kubeconfig_load(const char *path, kube_config *cfg, tetris_error *err);

/* Parses kubeconfig text; base_dir resolves relative paths (may be NULL). */
int kubeconfig_parse(const char *text, size_t len, const char *base_dir, kube_config *cfg,
                     tetris_error *err);

/* Service-account files in sa_dir: token (kept as token_file), ca.crt,
 * namespace. server NULL: from KUBERNETES_SERVICE_HOST/_PORT. */
int kubeconfig_in_cluster(const char *sa_dir, const char *server, kube_config *cfg,
                          tetris_error *err);

void kubeconfig_clear(kube_config *cfg);

#endif
