# Bootstrap tokens for hack/cluster/ (source it; do not run it).
# shellcheck shell=bash

# bootstrap_token KUBECTL_FN DESCRIPTION: creates a bootstrap token as `kubeadm token create`
# does (a kube-system Secret bootstrap-token-<id> of type bootstrap.kubernetes.io/token, for
# authentication and signing, in the kubeadm default-node-token group, valid for a day) and
# prints it as <id>.<secret>. KUBECTL_FN is a command running kubectl as the admin.
bootstrap_token() {
	local kc="$1" description="$2" id secret expiration
	# [a-z0-9]{6}.[a-z0-9]{16}, the format the apiserver's token authenticator accepts (hex
	# digits are a subset).
	id="$(openssl rand -hex 3)"
	secret="$(openssl rand -hex 8)"
	expiration="$(date -u -d '+1 day' +%Y-%m-%dT%H:%M:%SZ)"
	"$kc" apply -f - >/dev/null <<SECRET
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: "$description"
  token-id: "$id"
  token-secret: "$secret"
  expiration: "$expiration"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: "system:bootstrappers:kubeadm:default-node-token"
SECRET
	echo "$id.$secret"
}
