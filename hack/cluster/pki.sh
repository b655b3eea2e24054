# Certificates and kubeconfigs for hack/cluster/. Source it; do not run it.
# shellcheck shell=bash

# The cluster CA, made once per directory.
pki_ca() {
	local pki="$1"
	[[ -f "$pki/ca.crt" && -f "$pki/ca.key" ]] && return 0
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" \
		-days 3650 -subj "/CN=kubelet-rs-cluster-ca" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# pki_cert DIR NAME SUBJECT USAGE [SANS]: DIR/NAME.{key,crt} signed by the CA, X.509 v3 (an
# extension file makes openssl write v3; rustls refuses the v1 it writes without one).
pki_cert() {
	local pki="$1" name="$2" subj="$3" usage="$4" sans="${5:-}"
	[[ -f "$pki/$name.crt" && -f "$pki/$name.key" ]] && return 0
	local ext
	ext="$(mktemp)"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[[ -z "$sans" ]] || echo "subjectAltName=$sans"
	} >"$ext"
	openssl req -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj" 2>/dev/null
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 3650 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$ext" "$pki/$name.csr"
}

# write_kubeconfig FILE SERVER CA CERT KEY USER
write_kubeconfig() {
	local file="$1" server="$2" ca="$3" cert="$4" key="$5" user="$6"
	cat >"$file" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: $server
    certificate-authority: $ca
users:
- name: $user
  user:
    client-certificate: $cert
    client-key: $key
contexts:
- name: local
  context:
    cluster: local
    user: $user
current-context: local
KUBECONFIG
}

# wait_for WHAT SECONDS COMMAND...: retries COMMAND each half second until it succeeds.
wait_for() {
	local what="$1" limit="$2"
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "$what not ready after ${limit}s (logs in $LOGS)"
		sleep 0.5
	done
}
