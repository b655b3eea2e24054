#!/bin/bash
# The pod network of a kind cluster whose nodes run kubelet-rs, without kindnetd (an image
# from a registry): every node shares one podman network (one L2 segment), so a route per
# node is all pods need. Every few seconds, with the node's own credentials (kubelet.conf: the
# default-storage.yaml grants nodes the listing of Nodes), it
#   - writes /etc/cni/net.d/10-kind.conflist for this node's spec.podCIDR (bridge + host-local
#     + portmap, from Debian's CNI plugins) once the controller manager has allocated it;
#   - routes every other node's podCIDR via that node's InternalIP.
# No masquerading: pods reach only pods, Services and nodes, all routed back without NAT.
# Only this node's network namespace is touched (no sysctl outside it).
set -u
KUBECONFIG_FILE=/etc/kubernetes/kubelet.conf
CONF=/etc/cni/net.d/10-kind.conflist
me="$(hostname)"

write_conf() {
	local cidr="$1" tmp
	tmp="$(mktemp /etc/cni/net.d/.kind.XXXXXX)"
	cat >"$tmp" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "kind",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "kind0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$cidr" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
CONF
	chmod 644 "$tmp"
	mv "$tmp" "$CONF"
}

mkdir -p /etc/cni/net.d
while :; do
	if [[ -f "$KUBECONFIG_FILE" ]] &&
		nodes="$(kubectl --kubeconfig "$KUBECONFIG_FILE" --request-timeout=10s get nodes \
			-o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' 2>/dev/null)"; then
		while read -r name cidr ip; do
			[[ -n "$cidr" && -n "$ip" ]] || continue
			if [[ "$name" == "$me" ]]; then
				grep -qF "\"$cidr\"" "$CONF" 2>/dev/null || { write_conf "$cidr" && echo "pod CIDR $cidr"; }
			else
				[[ "$(ip route show "$cidr")" == *"via $ip "* ]] ||
					{ ip route replace "$cidr" via "$ip" && echo "route $cidr via $ip ($name)"; }
			fi
		done <<<"$nodes"
	fi
	sleep 3
done
