# Certificates and kubeconfigs for hack/cluster/. Source it; do not run it.
# shellcheck shell=bash

# The cluster CA, made once per directory.
pki_ca() {
	pki_named_ca "$1" ca kubelet-rs-cluster-ca
}

# pki_named_ca DIR NAME CN: a self-signed CA DIR/NAME.{crt,key}, made once per directory (the
# aggregation layer's front-proxy CA is a second one beside the cluster's).
pki_named_ca() {
	local pki="$1" name="$2" cn="$3"
	[[ -f "$pki/$name.crt" && -f "$pki/$name.key" ]] && return 0
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.crt" \
		-days 3650 -subj "/CN=$cn" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}

# pki_cert DIR NAME SUBJECT USAGE [SANS]: DIR/NAME.{key,crt} signed by the cluster CA.
pki_cert() {
	pki_cert_by "$1" ca "${@:2}"
}

# pki_cert_by DIR CA NAME SUBJECT USAGE [SANS]: DIR/NAME.{key,crt} signed by DIR/CA.{crt,key},
# X.509 v3 (an extension file makes openssl write v3; rustls refuses the v1 it writes without
# one). What the certificate was made from (subject, usage, SANs, the signing CA's fingerprint)
# is kept in DIR/NAME.request: an existing certificate is reused only while that still matches,
# so a changed request (a SAN added here, a new CA) regenerates it in cluster dirs made before,
# and dev machines and fresh CI machines end up with the same certificates.
pki_cert_by() {
	local pki="$1" ca="$2" name="$3" subj="$4" usage="$5" sans="${6:-}"
	local request
	request="$(printf 'subject=%s\nusage=%s\nsans=%s\nca=%s\n' "$subj" "$usage" "$sans" \
		"$(openssl x509 -in "$pki/$ca.crt" -noout -fingerprint -sha256)")"
	if [[ -f "$pki/$name.crt" && -f "$pki/$name.key" && "$(cat "$pki/$name.request" 2>/dev/null)" == "$request" ]]; then
		return 0
	fi
	local ext
	ext="$(mktemp)"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[[ -z "$sans" ]] || echo "subjectAltName=$sans"
	} >"$ext"
	openssl req -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj" 2>/dev/null
	openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
		-days 3650 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
	rm -f "$ext" "$pki/$name.csr"
	# Written last: an interrupted run leaves no matching request, so the certificate is redone.
	printf '%s\n' "$request" >"$pki/$name.request"
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
