//! The explicit lifecycle APIs (load, unload, TF Serving's reload-config): each changes what
//! the reconciler wants, then reconciles the models it touched under the reconcile lock.
//! Each is refused first, before anything else is looked at, when the server's models are
//! fixed (`--model-control-api=false`), so that no protocol can reach around that.

use std::path::PathBuf;

use super::confine::{check_model_name, ConfineError};
use super::control::ServedModel;
use super::error::RepositoryError;
use super::lifecycle::ModelRepository;
use super::scan::ScanError;
use super::tfs_config::ListPaths;

impl ModelRepository {
    /// Loads `name` (again): clears an earlier unload and reconciles it now.
    pub async fn load_model(&self, name: &str) -> Result<(), RepositoryError> {
        self.check_client_control()?;
        check_model_name(name)?;
        let mut control = self.control.lock().await;
        control.unloaded.remove(name);
        self.reconcile_locked(&mut control, Some(name))
            .await
            .map_err(|err| self.internal(&err))?;
        let snapshot = self.snapshot();
        let record = snapshot
            .model(name)
            .map_err(|_| RepositoryError::ModelNotFound(name.to_owned()))?;
        record.resolve(&super::VersionSelector::Latest).map(|_| ())
    }

    /// Unloads every version of `name`; it stays unloaded until loaded again.
    pub async fn unload_model(&self, name: &str) -> Result<(), RepositoryError> {
        self.check_client_control()?;
        check_model_name(name)?;
        let mut control = self.control.lock().await;
        self.snapshot().model(name)?;
        control.unloaded.insert(name.to_owned());
        self.reconcile_locked(&mut control, Some(name))
            .await
            .map_err(|err| self.internal(&err))
    }

    /// Serves exactly `models` from now on, as a client asks (TF Serving's
    /// HandleReloadConfigRequest).
    pub async fn reload_config(&self, models: Vec<ServedModel>) -> Result<(), RepositoryError> {
        self.check_client_control()?;
        self.serve_only(models).await
    }

    /// Serves exactly `models` from now on, as the operator's model config file says.
    pub async fn serve_only(&self, models: Vec<ServedModel>) -> Result<(), RepositoryError> {
        let mut control = self.control.lock().await;
        control.unloaded.clear();
        control.served = Some(models.into_iter().map(|m| (m.name.clone(), m)).collect());
        self.reconcile_locked(&mut control, None)
            .await
            .map_err(|err| self.internal(&err))
    }

    /// Refuses a client's load, unload or reload where the models are fixed. It comes before
    /// the name is checked, as Triton's refusal does, so it says nothing about which exist.
    pub fn check_client_control(&self) -> Result<(), RepositoryError> {
        if self.client_control {
            Ok(())
        } else {
            Err(RepositoryError::ModelControlClosed)
        }
    }

    /// The folder a reload-config entry's versions live in: `base_path` (empty: the model
    /// directory's folder of that name), confined to the model roots.
    pub fn model_path(&self, name: &str, base_path: &str) -> Result<PathBuf, ConfineError> {
        self.roots.resolve(name, base_path)
    }

    /// A failure to read the repository, as a client may see it: without the server's paths.
    fn internal(&self, err: &ScanError) -> RepositoryError {
        tracing::error!(error = %err, "cannot read the model repository");
        RepositoryError::Unreadable(self.roots.redact(&err.to_string()))
    }
}

/// A reload-config's list, from the network: its `base_path`s confined to the model roots,
/// its payload-log prefixes to the log folders.
impl ListPaths for ModelRepository {
    fn base_path(&self, name: &str, base_path: &str) -> Result<PathBuf, ConfineError> {
        self.model_path(name, base_path)
    }

    fn log_prefix(
        &self,
        name: &str,
        prefix: &str,
    ) -> Result<(PathBuf, Option<PathBuf>), ConfineError> {
        let confined = self.log_roots.resolve(name, prefix)?;
        Ok((confined.prefix, Some(confined.root)))
    }
}
