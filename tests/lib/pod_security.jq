# pod_security.jq - the Pod Security Standards' "restricted" profile (its
# "baseline" rules included) as a jq function over a pod object, for the
# clusters whose apiserver has no Pod Security admission (it came in
# Kubernetes 1.22; the local cluster runs 1.20). `restricted_violations`
# gives one string per rule the pod breaks, [] when it passes.
#
# Usage: jq -L tests/lib 'include "pod_security"; restricted_violations' POD.json

def _containers: [(.spec.containers // [])[], (.spec.initContainers // [])[],
                  (.spec.ephemeralContainers // [])[]];

# A container's effective setting: its own, else the pod's.
def _effective($pod; $c; $key): ($c.securityContext // {})[$key] // ($pod.spec.securityContext // {})[$key];

def restricted_violations:
  . as $pod
  | ($pod.spec // {}) as $spec
  | ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
     "persistentVolumeClaim", "projected", "secret"] as $volume_types
  | [
      # baseline
      (if $spec.hostNetwork == true then "hostNetwork" else empty end),
      (if $spec.hostPID == true then "hostPID" else empty end),
      (if $spec.hostIPC == true then "hostIPC" else empty end),
      (_containers[] | select(.securityContext.privileged == true)
       | "container \(.name): privileged"),
      (_containers[] | select(((.securityContext.windowsOptions // {}).hostProcess) == true)
       | "container \(.name): hostProcess"),
      (_containers[] | select([(.ports // [])[] | select((.hostPort // 0) != 0)] | length > 0)
       | "container \(.name): hostPort"),
      (_containers[] | select((.securityContext.procMount // "Default") != "Default")
       | "container \(.name): procMount"),
      (($spec.securityContext.sysctls // [])[]
       | select(.name | IN("kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                           "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                           "net.ipv4.ping_group_range") | not)
       | "sysctl \(.name)"),
      # restricted: volume types
      (($spec.volumes // [])[]
       | select([keys[] | select(. != "name")] | any(IN($volume_types[])) | not)
       | "volume \(.name): type \([keys[] | select(. != "name")] | join(","))"),
      # restricted: per container
      (_containers[] as $c
       | (if ($c.securityContext.allowPrivilegeEscalation) != false
          then "container \($c.name): allowPrivilegeEscalation not false" else empty end),
         (if _effective($pod; $c; "runAsNonRoot") != true
          then "container \($c.name): runAsNonRoot not true" else empty end),
         (if _effective($pod; $c; "runAsUser") == 0
          then "container \($c.name): runAsUser 0" else empty end),
         (if (_effective($pod; $c; "seccompProfile") // {}).type
             | IN("RuntimeDefault", "Localhost") | not
          then "container \($c.name): seccompProfile not RuntimeDefault or Localhost"
          else empty end),
         (if (($c.securityContext.capabilities.drop // []) | index("ALL")) == null
          then "container \($c.name): capabilities do not drop ALL" else empty end),
         (($c.securityContext.capabilities.add // [])[] | select(. != "NET_BIND_SERVICE")
          | "container \($c.name): adds capability \(.)"))
    ];
