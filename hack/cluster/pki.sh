# Certificates and kubeconfigs for hack/cluster/. Source it; do not run it.
# shellcheck shell=bash

# Every certificate of a directory is made under that directory's lock (DIR/.lock): the tests
# make node certificates from several processes at once, and two writers of one name, or a
# reader of a half-written CA, would leave a broken file. Serials are random (-set_serial), as
# a CA's should be, so no serial file is shared between signings. openssl's words are kept and
# shown when it fails (lib.sh's quiet).

# The cluster CA, made once per directory.
pki_ca() {
	pki_named_ca "$1" ca kubelet-rs-cluster-ca
}

# pki_named_ca DIR NAME CN: a self-signed CA DIR/NAME.{crt,key}, made once per directory (the
# aggregation layer's front-proxy CA is a second one beside the cluster's).
pki_named_ca() {
	mkdir -p "$1"
	with_lock "$1/.lock" pki_named_ca_locked "$@"
}

pki_named_ca_locked() {
	local pki="$1" name="$2" cn="$3"
	[[ -f "$pki/$name.crt" && -f "$pki/$name.key" ]] && return 0
	quiet "making the CA $pki/$name" openssl req -x509 -newkey rsa:2048 -nodes \
		-keyout "$pki/.$name.key.tmp" -out "$pki/.$name.crt.tmp" -days 3650 -subj "/CN=$cn" \
		-set_serial "0x$(openssl rand -hex 16)" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
	# The key first: a CA certificate without its key would be taken as made. (Run under
	# with_lock, where set -e does not hold: each step checks itself.)
	mv "$pki/.$name.key.tmp" "$pki/$name.key" || die "cannot move the CA key into $pki"
	mv "$pki/.$name.crt.tmp" "$pki/$name.crt" || die "cannot move the CA certificate into $pki"
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
	with_lock "$1/.lock" pki_cert_locked "$@"
}

pki_cert_locked() {
	local pki="$1" ca="$2" name="$3" subj="$4" usage="$5" sans="${6:-}"
	local request fingerprint
	fingerprint="$(openssl x509 -in "$pki/$ca.crt" -noout -fingerprint -sha256 2>&1)" ||
		die "reading the CA $pki/$ca.crt failed: $fingerprint"
	request="$(printf 'subject=%s\nusage=%s\nsans=%s\nca=%s\n' "$subj" "$usage" "$sans" "$fingerprint")"
	if [[ -s "$pki/$name.crt" && -s "$pki/$name.key" && "$(cat "$pki/$name.request" 2>/dev/null)" == "$request" ]]; then
		return 0
	fi
	local tmp="$pki/.$name.tmp"
	rm -rf "$tmp" && mkdir "$tmp" || die "cannot make the scratch folder $tmp"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[[ -z "$sans" ]] || echo "subjectAltName=$sans"
	} >"$tmp/ext" || die "cannot write $tmp/ext"
	quiet "making the key and request of $pki/$name" openssl req -newkey rsa:2048 -nodes \
		-keyout "$tmp/key" -out "$tmp/csr" -subj "$subj"
	quiet "signing $pki/$name with $pki/$ca" openssl x509 -req -in "$tmp/csr" \
		-CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -set_serial "0x$(openssl rand -hex 16)" \
		-days 3650 -extfile "$tmp/ext" -out "$tmp/crt"
	[[ -s "$tmp/crt" ]] || die "openssl signed $pki/$name but wrote an empty certificate"
	rm -f "$pki/$name.request" &&
		mv "$tmp/key" "$pki/$name.key" &&
		mv "$tmp/crt" "$pki/$name.crt" &&
		rm -rf "$tmp" || die "cannot move $pki/$name's key and certificate into place"
	# Written last: an interrupted run leaves no matching request, so the certificate is redone.
	printf '%s\n' "$request" >"$pki/$name.request" || die "cannot write $pki/$name.request"
}

# write_kubeconfig FILE SERVER CA CERT KEY USER
write_kubeconfig() {
	local file="$1" server="$2" ca="$3" cert="$4" key="$5" user="$6"
	# Through a temporary name: a reader (an agent starting) never sees half a file.
	cat >"$file.tmp.$$" <<KUBECONFIG
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
	mv "$file.tmp.$$" "$file"
}

# wait_for WHAT SECONDS COMMAND...: retries COMMAND each half second until it succeeds; when
# time is up, dies with what its last try printed.
wait_for() {
	local what="$1" limit="$2" out
	shift 2
	local deadline=$((SECONDS + limit))
	until out="$("$@" 2>&1)"; do
		((SECONDS < deadline)) || die "$what not ready after ${limit}s (logs in $LOGS); the last try, $*, said: $out"
		sleep 0.5
	done
}
