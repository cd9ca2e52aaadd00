//! The set of registered regions, shared by every protocol.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::{Region, ShmError};

/// Who may register regions. Registering makes the server map memory of this machine, which
/// only a process on this machine can have created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ShmPolicy {
    /// Shared memory is refused.
    Off,
    /// Only peers on a loopback address or a Unix socket may register.
    #[default]
    Local,
    /// Any peer may register.
    Any,
}

/// Where a registration request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Ip(IpAddr),
    /// A Unix socket or an in-process caller.
    Local,
    Unknown,
}

/// What the status endpoints report for one region.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionStatus {
    pub name: String,
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// Registered regions by name.
pub struct ShmRegistry {
    policy: ShmPolicy,
    /// Held only to look up, insert or remove; never across a map or a request.
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
}

impl ShmRegistry {
    pub fn new(policy: ShmPolicy) -> Self {
        Self {
            policy,
            regions: Mutex::new(BTreeMap::new()),
        }
    }

    fn regions(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Region>>> {
        // A panic while holding this lock cannot leave the map half-changed (single inserts and
        // removes), so a poisoned lock is still consistent.
        self.regions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check_enabled(&self) -> Result<(), ShmError> {
        if self.policy == ShmPolicy::Off {
            return Err(ShmError::Disabled);
        }
        Ok(())
    }

    /// Maps `key` and registers it as `name`.
    pub fn register(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
        peer: Peer,
    ) -> Result<(), ShmError> {
        self.check_enabled()?;
        if self.policy == ShmPolicy::Local {
            match peer {
                Peer::Ip(ip) if !ip.is_loopback() => {
                    return Err(ShmError::RemotePeer(ip.to_string()))
                }
                Peer::Unknown => return Err(ShmError::RemotePeer("an unknown address".into())),
                _ => {}
            }
        }
        if self.regions().contains_key(name) {
            return Err(ShmError::AlreadyExists(name.to_owned()));
        }
        // Mapping happens outside the lock; a racing registration of the same name loses below.
        let region = Arc::new(Region::open(name, key, offset, byte_size)?);
        let mut regions = self.regions();
        if regions.contains_key(name) {
            return Err(ShmError::AlreadyExists(name.to_owned()));
        }
        regions.insert(name.to_owned(), region);
        Ok(())
    }

    /// Removes `name`, or every region when `name` is `None`. Requests already using a region
    /// keep it mapped until they finish.
    pub fn unregister(&self, name: Option<&str>) -> Result<(), ShmError> {
        self.check_enabled()?;
        let mut regions = self.regions();
        match name {
            Some(name) => {
                regions.remove(name);
            }
            None => regions.clear(),
        }
        Ok(())
    }

    /// The status of `name`, or of every region.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, ShmError> {
        let regions = self.regions();
        let describe = |region: &Arc<Region>| RegionStatus {
            name: region.name.clone(),
            key: region.key.clone(),
            offset: region.offset,
            byte_size: region.byte_size as u64,
        };
        match name {
            Some(name) => regions
                .get(name)
                .map(|region| vec![describe(region)])
                .ok_or_else(|| ShmError::NotFound(name.to_owned())),
            None => Ok(regions.values().map(describe).collect()),
        }
    }

    /// The region registered as `name`.
    pub fn get(&self, name: &str) -> Result<Arc<Region>, ShmError> {
        self.check_enabled()?;
        self.regions()
            .get(name)
            .cloned()
            .ok_or_else(|| ShmError::NotFound(name.to_owned()))
    }

    /// Number of regions and bytes mapped, for metrics.
    pub fn usage(&self) -> (usize, u64) {
        let regions = self.regions();
        let bytes = regions.values().map(|r| r.byte_size as u64).sum();
        (regions.len(), bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared-memory object under /dev/shm, removed on drop.
    struct Object(String);

    impl Object {
        fn new(tag: &str, size: u64) -> Self {
            let key = format!("/tensorport-test-{tag}-{}", std::process::id());
            let fd = rustix::shm::open(
                key.as_str(),
                rustix::shm::OFlags::CREATE | rustix::shm::OFlags::RDWR,
                rustix::fs::Mode::from_raw_mode(0o600),
            )
            .expect("create shm object");
            rustix::fs::ftruncate(&fd, size).expect("size shm object");
            Self(key)
        }
    }

    impl Drop for Object {
        fn drop(&mut self) {
            let _ = rustix::shm::unlink(self.0.as_str());
        }
    }

    #[test]
    fn keys_stay_under_dev_shm() {
        assert!(super::super::check_key("/ok_name").is_ok());
        assert!(super::super::check_key("ok").is_ok());
        for bad in ["/", "", "/a/b", "/../etc/passwd", "/..", "/a..b", "/x\0y"] {
            assert!(super::super::check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn register_view_write_and_unregister() -> Result<(), ShmError> {
        let object = Object::new("rw", 64);
        let registry = ShmRegistry::new(ShmPolicy::Local);
        let local = Peer::Ip(IpAddr::from([127, 0, 0, 1]));
        registry.register("r", &object.0, 16, 32, local)?;
        assert!(matches!(
            registry.register("r", &object.0, 0, 8, local),
            Err(ShmError::AlreadyExists(_))
        ));
        let region = registry.get("r")?;
        region.write(4, &[1, 2, 3])?;
        let view = region.view(4, 3)?;
        assert_eq!(&view[..], &[1, 2, 3]);
        assert!(matches!(
            region.view(30, 4),
            Err(ShmError::WindowPastEnd { .. })
        ));
        assert!(matches!(region.view(u64::MAX, 2), Err(ShmError::Overflow)));

        registry.unregister(Some("r"))?;
        assert!(matches!(registry.get("r"), Err(ShmError::NotFound(_))));
        // The view still holds the mapping.
        assert_eq!(&view[..], &[1, 2, 3]);
        Ok(())
    }

    #[test]
    fn region_must_fit_the_object() {
        let object = Object::new("fit", 16);
        let registry = ShmRegistry::new(ShmPolicy::Any);
        let result = registry.register("r", &object.0, 8, 16, Peer::Local);
        assert!(matches!(result, Err(ShmError::RegionPastEnd { .. })));
        let missing = registry.register("m", "/tensorport-no-such-object", 0, 8, Peer::Local);
        assert!(matches!(missing, Err(ShmError::Open { .. })));
    }

    #[test]
    fn truncated_objects_are_errors_not_faults() -> Result<(), ShmError> {
        let object = Object::new("trunc", 4096);
        let registry = ShmRegistry::new(ShmPolicy::Any);
        registry.register("r", &object.0, 0, 4096, Peer::Local)?;
        let fd = rustix::shm::open(
            object.0.as_str(),
            rustix::shm::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        )
        .expect("reopen");
        rustix::fs::ftruncate(&fd, 0).expect("truncate");
        let region = registry.get("r")?;
        assert!(matches!(region.view(0, 8), Err(ShmError::Truncated { .. })));
        assert!(matches!(
            region.write(0, &[1]),
            Err(ShmError::Truncated { .. })
        ));
        Ok(())
    }

    #[test]
    fn policy_limits_who_registers() {
        let object = Object::new("policy", 8);
        let local_only = ShmRegistry::new(ShmPolicy::Local);
        let remote = Peer::Ip(IpAddr::from([10, 1, 2, 3]));
        assert!(matches!(
            local_only.register("r", &object.0, 0, 8, remote),
            Err(ShmError::RemotePeer(_))
        ));
        let off = ShmRegistry::new(ShmPolicy::Off);
        assert!(matches!(
            off.register("r", &object.0, 0, 8, Peer::Local),
            Err(ShmError::Disabled)
        ));
    }
}
