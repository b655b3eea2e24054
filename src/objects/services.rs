//! Every Service of the cluster, kept current by one list+watch ([`Reflected`]), as
//! upstream's kubelet keeps its service informer: the containers' service environment
//! variables are made from it (`pod::spec::service_env`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;

use super::reflected::Reflected;
use super::{ObjectError, ServicesWait};

pub(crate) struct Services(Reflected<Service>);

impl Services {
    /// Starts the list+watch (in the runtime this is called in).
    pub(crate) fn watch(client: kube::Client) -> Self {
        Services(Reflected::watch(client, "Services"))
    }

    /// The Services as last seen. Without a wait (a static pod), before the first listing
    /// that is none; with one, a first listing that does not come in a few seconds is
    /// upstream's "not yet read" error (and the container start is retried).
    pub(crate) async fn list(&self, wait: ServicesWait) -> Result<Vec<Arc<Service>>, ObjectError> {
        if wait == ServicesWait::No || self.0.listed().await {
            Ok(self.0.all())
        } else {
            Err(ObjectError::ServicesNotSynced)
        }
    }
}
