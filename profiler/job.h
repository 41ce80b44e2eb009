/* job.h - profiling inside a cluster: the Kubernetes Job that runs
 * `tetris-profiler profile` on a node (printed for `kubectl apply -f -`),
 * and the ConfigMaps the profiler stores its results in:
 *
 *   tetris-manifest-<name>  label tetris.io/model=<model>    key manifest.json
 *   tetris-profile-<name>   label tetris.io/profile=<model>  key profile.yaml
 *
 * (protocol/names.h). The manifest ConfigMap is what the scheduler extender
 * and tetris-node-pins read, the profile ConfigMap what the autoscaler
 * reads; <name> is <model> made a valid object name (lower case, '_' and
 * '.' to '-'). */
#ifndef TETRIS_JOB_H
#define TETRIS_JOB_H

#include <stdio.h>

#include "common/error.h"

struct job_options {
    const char *model;       /* model file name, under model_dir on the node */
    const char *name;        /* model name (label value) */
    const char *namespace_;  /* default TETRIS_NAMESPACE */
    const char *image;       /* default tetris:latest */
    const char *model_dir;   /* host directory of the models, default TETRIS_MODEL_HOST_DIR */
    const char *store_dir;   /* the node's store, default TETRIS_STORE_DIR */
    const char *grid;        /* NULL: the profiler's default grid */
    double duration_s, warmup_s;
    const char *node;        /* pin to this node (kubernetes.io/hostname), or NULL */
    const char *api_server;  /* apiserver URL for the pod, NULL: in-cluster default */
    const char *sa_secret;   /* Secret with token/ca.crt/namespace, NULL: the
                                service account's own token */
};

void job_options_init(struct job_options *o);

/* A model name as an object-name suffix ("ch_PP-OCRv4.det" -> "ch-pp-ocrv4-det").
 * TETRIS_E_INVAL when nothing usable is left or it is not a valid label value. */
int job_object_name(const char *model, char *buf, size_t len, tetris_error *err);

/* Prints ServiceAccount, Role, RoleBinding and Job as YAML documents. */
int job_write_manifest(FILE *out, const struct job_options *o, tetris_error *err);

/* Creates or updates the manifest and profile ConfigMaps in ns through the
 * API (kubeconfig when given, else in-cluster with sa_dir and server
 * overrides, either may be NULL). */
struct configmap_target {
    const char *kubeconfig;
    const char *sa_dir;
    const char *server;
    const char *namespace_;
};
int job_store_configmaps(const struct configmap_target *t, const char *model,
                         const char *manifest_json, const char *profile_yaml,
                         tetris_error *err);

#endif
