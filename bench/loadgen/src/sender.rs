//! Turning a [`Config`] into something that sends one request: the connection, the prebuilt
//! bodies, and (with `--shm`) the registered region, which [`Setup::finish`] unregisters.

use bytes::Bytes;
use serde_json::json;
use tensorport_client::KserveClient;

use crate::config::{Config, Load, Protocol};
use crate::error::LoadgenError;
use crate::floor::FloorSender;
use crate::grpc::{self, GrpcSender};
use crate::http::{self, HttpClient, HttpSender};
use crate::payload;
use crate::shm::{Placed, ShmSetup};

/// Output areas in the region for an open-loop run (closed loops get one per worker).
const OPEN_LOOP_SLOTS: usize = 64;

/// Sends one request; shared by every worker.
pub enum Sender {
    Grpc(GrpcSender),
    Http(Box<HttpSender>),
    Floor(FloorSender),
}

impl Sender {
    /// One request with the body of `slot`. An error is its kind: `grpc:CODE`,
    /// `http:STATUS`, `transport`, `runtime`, `client:...`.
    pub async fn send(&self, slot: usize) -> Result<(), String> {
        match self {
            Self::Grpc(sender) => sender.send(slot).await,
            Self::Http(sender) => sender.send(slot).await,
            Self::Floor(sender) => sender.send(),
        }
    }
}

/// How the region was registered, so it can be unregistered the same way.
enum Registration {
    Grpc(KserveClient),
    Http(HttpClient),
}

/// A sender ready to run, and what must be undone after the run.
pub struct Setup {
    pub sender: Sender,
    pub teardown: Teardown,
}

/// The registered region, if any; [`Teardown::finish`] unregisters it.
pub struct Teardown {
    shm: Option<(ShmSetup, Registration)>,
    target: String,
}

impl Setup {
    pub async fn new(config: &Config) -> Result<Self, LoadgenError> {
        config.validate()?;
        let data = payload::inputs(config);
        let slots = match config.load() {
            Load::Closed { concurrency } => concurrency,
            Load::Open { .. } => OPEN_LOOP_SLOTS,
        };
        let shm = if config.shm {
            Some(ShmSetup::create(config, &data, slots)?)
        } else {
            None
        };
        // Per-slot bodies only differ in where shared-memory outputs go.
        let bodies = |build: &dyn Fn(Placed<'_>) -> Bytes| -> Vec<Bytes> {
            match &shm {
                Some(setup) => (0..setup.layout.slots())
                    .map(|slot| build(Some((&setup.layout, slot))))
                    .collect(),
                None => vec![build(None)],
            }
        };
        let target = config.target.as_str();
        let http_uri = |path: String| http::uri(target, &path).map_err(LoadgenError::Config);
        let (sender, registration) = match config.protocol {
            Protocol::KserveGrpc | Protocol::TfsGrpc | Protocol::HealthGrpc => {
                let mut channels = Vec::with_capacity(config.connections);
                for _ in 0..config.connections {
                    channels.push(grpc::connect(target).await?);
                }
                let first = channels.first().cloned().ok_or_else(|| {
                    LoadgenError::Config("--connections must be at least 1".into())
                })?;
                let registration = Registration::Grpc(KserveClient::new(first));
                let (path, bodies) = match config.protocol {
                    Protocol::TfsGrpc => {
                        (grpc::TFS_PREDICT, vec![payload::tfs_grpc(config, &data)])
                    }
                    // `ServerLiveRequest` has no fields: its encoding is empty.
                    Protocol::HealthGrpc => (grpc::KSERVE_SERVER_LIVE, vec![Bytes::new()]),
                    _ => {
                        let bodies = bodies(&|shm| payload::kserve_grpc(config, &data, shm));
                        (grpc::KSERVE_INFER, bodies)
                    }
                };
                (
                    Sender::Grpc(GrpcSender::new(channels, path, bodies)),
                    registration,
                )
            }
            Protocol::KserveHttp | Protocol::KserveHttpBinary | Protocol::TfsRest => {
                let client = http::client();
                let (uri, bodies, header_length) = match config.protocol {
                    Protocol::KserveHttpBinary => {
                        let (body, header) = payload::kserve_binary(&data);
                        let path = format!("/v2/models/{}/infer", config.model);
                        (http_uri(path)?, vec![body], Some(header))
                    }
                    Protocol::TfsRest => {
                        let path = format!("/v1/models/{}:predict", config.model);
                        (http_uri(path)?, vec![payload::tfs_rest(&data)], None)
                    }
                    _ => {
                        let path = format!("/v2/models/{}/infer", config.model);
                        let bodies = bodies(&|shm| payload::kserve_json(config, &data, shm));
                        (http_uri(path)?, bodies, None)
                    }
                };
                let sender = HttpSender::new(client.clone(), uri, bodies, header_length);
                (Sender::Http(Box::new(sender)), Registration::Http(client))
            }
            Protocol::HealthLive => {
                let client = http::client();
                let sender = HttpSender::get(client.clone(), http_uri("/v2/health/live".into())?);
                (Sender::Http(Box::new(sender)), Registration::Http(client))
            }
            Protocol::Floor => {
                let sender = FloorSender::new(config, &data)?;
                return Ok(Self {
                    sender: Sender::Floor(sender),
                    teardown: Teardown {
                        shm: None,
                        target: String::new(),
                    },
                });
            }
        };
        let shm = match shm {
            Some(shm) => {
                register(&shm, &registration, target).await?;
                Some((shm, registration))
            }
            None => None,
        };
        Ok(Self {
            sender,
            teardown: Teardown {
                shm,
                target: target.to_owned(),
            },
        })
    }

    pub fn split(self) -> (Sender, Teardown) {
        (self.sender, self.teardown)
    }
}

impl Teardown {
    /// Unregisters the region (the region itself is removed when dropped).
    pub async fn finish(self) -> Result<(), LoadgenError> {
        let Some((shm, registration)) = self.shm else {
            return Ok(());
        };
        let name = shm.layout.region.as_str();
        let failed =
            |message: String| LoadgenError::SharedMemory(format!("unregister {name}: {message}"));
        match registration {
            Registration::Grpc(mut client) => client
                .unregister_region(name)
                .await
                .map_err(|err| failed(err.to_string())),
            Registration::Http(client) => {
                let path = format!("/v2/systemsharedmemory/region/{name}/unregister");
                let uri = http::uri(&self.target, &path).map_err(failed)?;
                let (status, reply) = http::post_json(&client, uri, Bytes::new())
                    .await
                    .map_err(failed)?;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(failed(format!(
                        "{status}: {}",
                        String::from_utf8_lossy(&reply)
                    )))
                }
            }
        }
    }
}

async fn register(
    shm: &ShmSetup,
    registration: &Registration,
    target: &str,
) -> Result<(), LoadgenError> {
    let failed = |message: String| LoadgenError::SharedMemory(format!("register: {message}"));
    match registration {
        Registration::Grpc(client) => client
            .clone()
            .register_region(&shm.region)
            .await
            .map_err(|err| failed(err.to_string())),
        Registration::Http(client) => {
            let name = shm.region.name();
            let path = format!("/v2/systemsharedmemory/region/{name}/register");
            let uri = http::uri(target, &path).map_err(failed)?;
            let body = json!({ "key": shm.region.key(), "offset": 0, "byte_size": shm.region.byte_size() });
            let (status, reply) = http::post_json(client, uri, body.to_string().into())
                .await
                .map_err(failed)?;
            if status.is_success() {
                Ok(())
            } else {
                Err(failed(format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&reply)
                )))
            }
        }
    }
}
