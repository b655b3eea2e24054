//! The certificates API side: create a CertificateSigningRequest and wait until it is
//! approved and issued (or denied, or failed), as client-go's `csr.RequestCertificate` and
//! `csr.WaitForCertificate` do.

use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use tracing::{debug, info, warn};

use super::csr::Template;
use super::CertificateError;

/// Upstream retries a failed create with these pauses before it gives up on this attempt.
const CREATE_BACKOFF: &[Duration] = &[
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];

/// A request in the API: its name and UID (a request recreated under the same name is not
/// the one we wait for).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Submitted {
    pub name: String,
    pub uid: String,
}

/// Creates the request: named `name` (the bootstrap's digested name) or, without one, named
/// by the API from `csr-` (the certificate manager's renewals). A request of that name that
/// already exists is reused when it asks for the same thing (a restart while waiting).
pub(crate) async fn create(
    client: &kube::Client,
    template: &Template,
    request_pem: &str,
    name: Option<&str>,
) -> Result<Submitted, CertificateError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            generate_name: name.is_none().then(|| "csr-".to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request_pem.as_bytes().to_vec()),
            signer_name: template.signer.to_string(),
            usages: Some(template.usages.iter().map(|u| u.to_string()).collect()),
            ..Default::default()
        },
        status: None,
    };
    let shown = name.unwrap_or("csr-*").to_string();
    let mut pauses = CREATE_BACKOFF.iter();
    loop {
        match api.create(&PostParams::default(), &csr).await {
            Ok(created) => return submitted(&shown, &created),
            Err(kube::Error::Api(status)) if status.code == 409 && name.is_some() => {
                let existing =
                    api.get(&shown)
                        .await
                        .map_err(|source| CertificateError::Create {
                            name: shown.clone(),
                            source: Box::new(source),
                        })?;
                ensure_compatible(&shown, &csr, &existing)?;
                info!(csr = %shown, "reusing the certificate signing request already in the API");
                return submitted(&shown, &existing);
            }
            Err(source) => match pauses.next() {
                // Refusals (forbidden, invalid) will not change by asking again.
                Some(pause) if !is_refusal(&source) => {
                    warn!(csr = %shown, error = %source, "creating the certificate signing request failed; retrying");
                    tokio::time::sleep(*pause).await;
                }
                _ => {
                    return Err(CertificateError::Create {
                        name: shown,
                        source: Box::new(source),
                    })
                }
            },
        }
    }
}

fn is_refusal(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429)
}

fn submitted(name: &str, csr: &CertificateSigningRequest) -> Result<Submitted, CertificateError> {
    match (&csr.metadata.name, &csr.metadata.uid) {
        (Some(name), Some(uid)) => Ok(Submitted {
            name: name.clone(),
            uid: uid.clone(),
        }),
        _ => Err(CertificateError::Incompatible {
            name: name.to_string(),
            reason: "the API returned it without a name or UID".into(),
        }),
    }
}

/// client-go's `ensureCompatible`: same request bytes, signer and usages.
fn ensure_compatible(
    name: &str,
    wanted: &CertificateSigningRequest,
    existing: &CertificateSigningRequest,
) -> Result<(), CertificateError> {
    let reason = if existing.spec.request != wanted.spec.request {
        Some("its request differs")
    } else if existing.spec.signer_name != wanted.spec.signer_name {
        Some("its signerName differs")
    } else if existing.spec.usages.as_deref().unwrap_or_default()
        != wanted.spec.usages.as_deref().unwrap_or_default()
    {
        Some("its usages differ")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CertificateError::Incompatible {
            name: name.to_string(),
            reason: reason.into(),
        }),
        None => Ok(()),
    }
}

/// Where a request stands.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    Pending,
    /// Approved and signed: the certificate chain as PEM.
    Issued(String),
    Denied {
        reason: String,
        message: String,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// What a request's status says (an approved request without a certificate is still pending:
/// the signer has not got to it yet).
pub(crate) fn outcome(csr: &CertificateSigningRequest) -> Outcome {
    let Some(status) = &csr.status else {
        return Outcome::Pending;
    };
    for c in status.conditions.iter().flatten() {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        match c.type_.as_str() {
            "Denied" => {
                return Outcome::Denied {
                    reason: text(&c.reason),
                    message: text(&c.message),
                }
            }
            "Failed" => {
                return Outcome::Failed {
                    reason: text(&c.reason),
                    message: text(&c.message),
                }
            }
            _ => {}
        }
    }
    let approved = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Approved");
    match &status.certificate {
        Some(cert) if approved && !cert.0.is_empty() => {
            Outcome::Issued(String::from_utf8_lossy(&cert.0).into_owned())
        }
        _ => Outcome::Pending,
    }
}

/// Waits (a watch on the one request, rewatched after errors) until the request is issued,
/// denied or failed, or `timeout` passes; returns the certificate PEM.
pub(crate) async fn wait(
    client: &kube::Client,
    submitted: &Submitted,
    timeout: Duration,
) -> Result<String, CertificateError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let name = submitted.name.clone();
    let uid = submitted.uid.clone();
    let settled = move |csr: Option<&CertificateSigningRequest>| {
        csr.is_some_and(|c| {
            c.metadata.uid.as_deref() == Some(uid.as_str()) && outcome(c) != Outcome::Pending
        })
    };
    let watch = async {
        loop {
            match kube::runtime::wait::await_condition(api.clone(), &name, settled.clone()).await {
                Ok(Some(csr)) => return Ok(csr),
                // Deleted under us: nothing will ever be issued for it.
                Ok(None) => {
                    return Err(CertificateError::Gone { name: name.clone() });
                }
                Err(e) => {
                    debug!(csr = %name, error = %e, "watching the certificate signing request; rewatching");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    };
    let csr =
        tokio::time::timeout(timeout, watch)
            .await
            .map_err(|_| CertificateError::Timeout {
                name: name.clone(),
                timeout,
            })??;
    match outcome(&csr) {
        Outcome::Issued(pem) => Ok(pem),
        Outcome::Denied { reason, message } => Err(CertificateError::Denied {
            name,
            reason,
            message,
        }),
        Outcome::Failed { reason, message } => Err(CertificateError::Failed {
            name,
            reason,
            message,
        }),
        // The wait ends only on a settled request; keep the compiler's exhaustiveness.
        Outcome::Pending => Err(CertificateError::Timeout { name, timeout }),
    }
}
