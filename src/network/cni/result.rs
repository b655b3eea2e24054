//! Reading addresses out of CNI results. 0.3.x, 0.4.0 and 1.0.0 list `interfaces` and `ips`,
//! where each ip may point at its interface by index; 0.1.0/0.2.0 have `ip4`/`ip6` only.

use std::net::IpAddr;

use serde_json::Value;

/// Why a plugin's result gives no addresses.
#[derive(Debug, thiserror::Error)]
pub enum ResultError {
    #[error("result is not a JSON object")]
    NotObject,
    #[error("\"ips\" is not a list")]
    IpsNotList,
    #[error("ips[{index}] has no \"address\"")]
    NoAddress { index: usize },
    /// `at` is where in the result: `ips[<i>]`, `ip4` or `ip6`.
    #[error("{at}: {source}")]
    Address {
        at: String,
        #[source]
        source: NotCidr,
    },
}

/// An address that is not `<ip>[/<prefix>]`.
#[derive(Debug, thiserror::Error)]
#[error("address {cidr:?} is not an IP in CIDR form")]
pub struct NotCidr {
    cidr: String,
    #[source]
    source: std::net::AddrParseError,
}

/// The addresses assigned to `ifname` inside the sandbox, IPv4 first, without duplicates.
///
/// Like go-cni, an ip is eth0's when its `interface` index names an interface called `ifname`.
/// Some IPAM-only chains report ips without an index; those are taken only when no ip is
/// explicitly tied to `ifname`, which is the best a runtime can do with such a result.
pub(crate) fn interface_ips(result: &Value, ifname: &str) -> Result<Vec<IpAddr>, ResultError> {
    let Value::Object(obj) = result else {
        return Err(ResultError::NotObject);
    };
    let mut ips = match obj.get("ips") {
        Some(Value::Array(entries)) => ips_of_interface(entries, obj.get("interfaces"), ifname)?,
        Some(Value::Null) | None => legacy_ips(result)?,
        Some(_) => return Err(ResultError::IpsNotList),
    };
    // Stable sort: keeps the plugin's order within a family.
    ips.sort_by_key(|ip| ip.is_ipv6());
    let mut seen = Vec::with_capacity(ips.len());
    ips.retain(|ip| {
        let new = !seen.contains(ip);
        seen.push(*ip);
        new
    });
    Ok(ips)
}

fn ips_of_interface(
    entries: &[Value],
    interfaces: Option<&Value>,
    ifname: &str,
) -> Result<Vec<IpAddr>, ResultError> {
    let names: Vec<Option<&str>> = match interfaces {
        Some(Value::Array(ifaces)) => ifaces
            .iter()
            .map(|i| i.get("name").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    };
    let (mut tied, mut untied) = (Vec::new(), Vec::new());
    for (i, entry) in entries.iter().enumerate() {
        let address = entry
            .get("address")
            .and_then(Value::as_str)
            .ok_or(ResultError::NoAddress { index: i })?;
        let ip = parse_cidr_ip(address).map_err(|source| ResultError::Address {
            at: format!("ips[{i}]"),
            source,
        })?;
        match entry.get("interface").and_then(Value::as_u64) {
            Some(idx) => {
                if names.get(idx as usize).copied().flatten() == Some(ifname) {
                    tied.push(ip);
                }
            }
            None => untied.push(ip),
        }
    }
    Ok(if tied.is_empty() { untied } else { tied })
}

fn legacy_ips(result: &Value) -> Result<Vec<IpAddr>, ResultError> {
    let mut ips = Vec::new();
    for key in ["ip4", "ip6"] {
        if let Some(address) = result
            .get(key)
            .and_then(|v| v.get("ip"))
            .and_then(Value::as_str)
        {
            ips.push(
                parse_cidr_ip(address).map_err(|source| ResultError::Address {
                    at: key.to_string(),
                    source,
                })?,
            );
        }
    }
    Ok(ips)
}

fn parse_cidr_ip(cidr: &str) -> Result<IpAddr, NotCidr> {
    let ip = cidr.split_once('/').map_or(cidr, |(ip, _)| ip);
    ip.parse().map_err(|source| NotCidr {
        cidr: cidr.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ips(v: &[&str]) -> Vec<IpAddr> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn bridge_result_1_0_0_picks_eth0_not_the_host_side() {
        let result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "krs0", "mac": "aa:bb:cc:dd:ee:ff"},
                {"name": "veth1234", "mac": "aa:bb:cc:dd:ee:00"},
                {"name": "eth0", "mac": "aa:bb:cc:dd:ee:01", "sandbox": "/var/run/netns/x"}
            ],
            "ips": [
                {"interface": 2, "address": "fd00::5/64", "gateway": "fd00::1"},
                {"interface": 0, "address": "10.9.0.1/24"},
                {"interface": 2, "address": "10.9.0.5/24", "gateway": "10.9.0.1"}
            ]
        });
        assert_eq!(
            interface_ips(&result, "eth0").unwrap(),
            ips(&["10.9.0.5", "fd00::5"])
        );
        assert_eq!(interface_ips(&result, "krs0").unwrap(), ips(&["10.9.0.1"]));
    }

    #[test]
    fn result_0_3_1_with_version_fields_and_untied_ips() {
        let tied = json!({
            "cniVersion": "0.3.1",
            "interfaces": [{"name": "eth0", "sandbox": "/x"}],
            "ips": [{"version": "4", "interface": 0, "address": "10.1.2.3/16"}]
        });
        assert_eq!(interface_ips(&tied, "eth0").unwrap(), ips(&["10.1.2.3"]));
        let untied = json!({
            "cniVersion": "0.4.0",
            "ips": [{"version": "4", "address": "10.1.2.4/16"}, {"version": "4", "address": "10.1.2.4/16"}]
        });
        assert_eq!(interface_ips(&untied, "eth0").unwrap(), ips(&["10.1.2.4"]));
    }

    #[test]
    fn legacy_0_2_0_result() {
        let result = json!({"cniVersion": "0.2.0", "ip6": {"ip": "fd00::2/64"}, "ip4": {"ip": "10.0.0.2/8"}});
        assert_eq!(
            interface_ips(&result, "eth0").unwrap(),
            ips(&["10.0.0.2", "fd00::2"])
        );
    }

    #[test]
    fn no_address_for_the_interface_is_an_empty_list_and_garbage_is_an_error() {
        let other = json!({"interfaces": [{"name": "lo"}], "ips": [{"interface": 0, "address": "127.0.0.1/8"}]});
        assert!(interface_ips(&other, "eth0").unwrap().is_empty());
        assert!(
            interface_ips(&json!({"ips": [{"address": "nope/24"}]}), "eth0")
                .unwrap_err()
                .to_string()
                .contains("nope/24")
        );
        assert!(interface_ips(&json!([1]), "eth0").is_err());
        assert!(interface_ips(&json!({"ips": "x"}), "eth0").is_err());
    }
}
