#!/usr/bin/env bash
# A minimal PKI for the single-node test cluster (openssl only): a CA, the API server's serving
# certificate, client certificates for the components, the cluster admin and Cubicle (an
# ordinary user bound only by the namespaced Role in docs/kubernetes-rbac.yaml), the service-account key, and
# kubeconfigs with embedded certificates (no kubectl needed).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/env.sh"
P=$K8S_WORK/pki
mkdir -p "$P" && cd "$P"
# P-256 keys: RSA key generation took most of a bring-up on a loaded 2-core machine
key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -nodes -key ca.key -subj "/CN=cubicle-test-ca" -days 7 -out ca.crt
key sa.key
openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
# mk NAME CN O [SANs]: a key and a certificate signed by the CA (serving+client with SANs).
mk() {
  local n=$1 cn=$2 o=$3 san=${4:-} subj
  key "$n.key"
  subj="/CN=$cn"; [ -n "$o" ] && subj="/O=$o/CN=$cn"
  openssl req -new -key "$n.key" -subj "$subj" -out "$n.csr"
  {
    echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$san"
    else echo "extendedKeyUsage=clientAuth"; fi
  } > "$n.ext"
  openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 -extfile "$n.ext" -out "$n.crt" 2>/dev/null
  rm -f "$n.csr" "$n.ext"
}
mk apiserver kube-apiserver "" "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:127.0.0.1,IP:10.96.0.1"
mk apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
mk admin admin system:masters
mk cubicle cubicle "" # no group: only what rbac.yaml grants
mk scheduler system:kube-scheduler ""
mk controller-manager system:kube-controller-manager ""
mk kubelet "system:node:$K8S_NODE" system:nodes
mk kubelet-serving "$K8S_NODE" "" "DNS:$K8S_NODE,DNS:localhost,IP:127.0.0.1"
# kc NAME USER CERT [NAMESPACE]: a kubeconfig with everything embedded.
kc() {
  local ns=${4:-}
  {
    echo "apiVersion: v1"
    echo "kind: Config"
    echo "clusters:"
    echo "- name: cubicle-test"
    echo "  cluster:"
    echo "    server: $K8S_API"
    echo "    certificate-authority-data: $(base64 -w0 < ca.crt)"
    echo "users:"
    echo "- name: $2"
    echo "  user:"
    echo "    client-certificate-data: $(base64 -w0 < "$3.crt")"
    echo "    client-key-data: $(base64 -w0 < "$3.key")"
    echo "contexts:"
    echo "- name: default"
    echo "  context:"
    echo "    cluster: cubicle-test"
    echo "    user: $2"
    [ -n "$ns" ] && echo "    namespace: $ns"
    echo "current-context: default"
  } > "$K8S_WORK/$1.kubeconfig"
  chmod 600 "$K8S_WORK/$1.kubeconfig"
}
kc admin admin admin
kc cubicle cubicle cubicle "$K8S_NAMESPACE"
kc scheduler system:kube-scheduler scheduler
kc controller-manager system:kube-controller-manager controller-manager
kc kubelet "system:node:$K8S_NODE" kubelet
