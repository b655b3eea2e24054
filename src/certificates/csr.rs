//! What the node asks the certificates API for: an ECDSA P-256 key (upstream's choice for
//! its generated keys), a PKCS#10 request with the node's subject, the usages a signer
//! accepts for it, and the deterministic `node-csr-<hash>` name of the bootstrap request.

use std::net::IpAddr;

use base64::Engine;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use sha2::{Digest, Sha512_256};

use super::CertificateError;

/// The signer of kubelets' client certificates (the controller-manager signs them with the
/// cluster CA once approved).
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// The signer of kubelets' serving certificates (approved by a person or an approver).
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// The group every node's certificate names (what the Node authorizer keys on).
pub const NODES_GROUP: &str = "system:nodes";

/// Usages of a client certificate with an ECDSA key: upstream adds key encipherment only for
/// RSA keys, and the client signer refuses anything beyond these (and key encipherment).
pub(crate) const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
/// Usages of a serving certificate with an ECDSA key.
pub(crate) const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

/// `system:node:<name>`, the user a node's certificate authenticates as.
pub fn node_user(node: &str) -> String {
    format!("system:node:{node}")
}

/// What one request asks for: the subject, the serving names, the signer and usages.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Template {
    pub common_name: String,
    pub organization: String,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub signer: &'static str,
    pub usages: &'static [&'static str],
}

impl Template {
    /// The client certificate of node `node` (upstream's bootstrap and client rotation).
    pub fn client(node: &str) -> Template {
        Template {
            common_name: node_user(node),
            organization: NODES_GROUP.to_string(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            signer: CLIENT_SIGNER,
            usages: CLIENT_USAGES,
        }
    }

    /// The serving certificate of node `node`, valid for its host names and addresses.
    pub fn serving(node: &str, dns_names: Vec<String>, ip_addresses: Vec<IpAddr>) -> Template {
        Template {
            common_name: node_user(node),
            organization: NODES_GROUP.to_string(),
            dns_names,
            ip_addresses,
            signer: SERVING_SIGNER,
            usages: SERVING_USAGES,
        }
    }

    /// The PEM of a certificate request for this template, signed with `key`.
    pub fn request_pem(&self, key: &KeyPair) -> Result<String, CertificateError> {
        let err = |source| CertificateError::BuildRequest {
            subject: self.common_name.clone(),
            source,
        };
        let mut params = CertificateParams::default();
        // rcgen's default subject is a placeholder CN; the node's subject replaces it (O
        // before CN, the order Go's pkix.Name encodes them in).
        let mut subject = DistinguishedName::new();
        subject.push(DnType::OrganizationName, self.organization.clone());
        subject.push(DnType::CommonName, self.common_name.clone());
        params.distinguished_name = subject;
        for name in &self.dns_names {
            params
                .subject_alt_names
                .push(SanType::DnsName(name.clone().try_into().map_err(err)?));
        }
        for ip in &self.ip_addresses {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        params
            .serialize_request(key)
            .map_err(err)?
            .pem()
            .map_err(err)
    }

    /// Upstream's `digestedName`: the bootstrap request's name is a hash of the public key,
    /// subject and usages, so a restarted node asking again with the same key finds its own
    /// request instead of piling up new ones.
    pub fn digested_name(&self, key: &KeyPair) -> String {
        let encode = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
        let mut hash = Sha512_256::new();
        // '|' is outside the base64url alphabet: no two inputs write the same stream.
        let mut write = |data: &[u8]| {
            hash.update(encode(data).as_bytes());
            hash.update(b"|");
        };
        write(&key.public_key_der());
        write(self.common_name.as_bytes());
        write(self.organization.as_bytes());
        for usage in self.usages {
            write(usage.as_bytes());
        }
        format!("node-csr-{}", encode(&hash.finalize()))
    }
}

/// A new private key: ECDSA P-256, as upstream generates.
pub(crate) fn new_key() -> Result<KeyPair, CertificateError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CertificateError::GenerateKey)
}
