//! The set of registered regions, shared by every protocol.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::error::ShmError;
use super::limits;
use super::peer::{Peer, PeerClass};
use super::policy::{check_name, ShmLimits, ShmPolicy};
use super::region::Region;

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
    limits: ShmLimits,
    /// Held only to look up, insert or remove; never across a map or a request.
    regions: Mutex<BTreeMap<String, Arc<Region>>>,
}

impl ShmRegistry {
    /// A registry with the default limits.
    pub fn new(policy: ShmPolicy) -> Self {
        Self::with_limits(policy, ShmLimits::default())
    }

    pub fn with_limits(policy: ShmPolicy, limits: ShmLimits) -> Self {
        Self {
            policy,
            limits,
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

    /// Whether `peer` may see `region`: under `--shm local` only regions its own class
    /// registered (so a remote peer sees none), otherwise all.
    fn visible(&self, region: &Region, peer: Peer) -> bool {
        self.policy != ShmPolicy::Local || region.class == peer.class()
    }

    /// Refuses a registration of `byte_size` more bytes that would exceed a limit.
    fn check_limits(
        &self,
        regions: &BTreeMap<String, Arc<Region>>,
        byte_size: u64,
    ) -> Result<(), ShmError> {
        if regions.len() >= self.limits.max_regions {
            return Err(ShmError::TooManyRegions(self.limits.max_regions));
        }
        let registered: u64 = regions.values().map(|r| r.byte_size as u64).sum();
        if registered.saturating_add(byte_size) > self.limits.max_bytes {
            return Err(ShmError::TooManyBytes {
                byte_size,
                registered,
                limit: self.limits.max_bytes,
            });
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
        if self.policy == ShmPolicy::Local && peer.class() == PeerClass::Remote {
            return Err(ShmError::RemotePeer(peer.describe()));
        }
        check_name(name)?;
        {
            let regions = self.regions();
            if regions.contains_key(name) {
                return Err(ShmError::AlreadyExists(name.to_owned()));
            }
            if regions.len() >= self.limits.max_regions {
                return Err(ShmError::TooManyRegions(self.limits.max_regions));
            }
        }
        // Each region keeps a descriptor open; connections and model files need theirs.
        limits::check_descriptor_reserve()?;
        // Mapping happens outside the lock (and first: a size the object cannot hold is a bad
        // request before it is a limit); a racing registration of the same name, or one that
        // took the last of a limit, wins below.
        let region = Arc::new(Region::open(name, key, offset, byte_size, peer.class())?);
        let mut regions = self.regions();
        if regions.contains_key(name) {
            return Err(ShmError::AlreadyExists(name.to_owned()));
        }
        self.check_limits(&regions, byte_size)?;
        regions.insert(name.to_owned(), region);
        Ok(())
    }

    /// Removes `name`, or every region `peer` may see when `name` is `None`. Requests already
    /// using a region keep it mapped until they finish.
    pub fn unregister(&self, name: Option<&str>, peer: Peer) -> Result<(), ShmError> {
        self.check_enabled()?;
        let mut regions = self.regions();
        match name {
            Some(name) => {
                if regions.get(name).is_some_and(|r| self.visible(r, peer)) {
                    regions.remove(name);
                }
            }
            None => regions.retain(|_, region| !self.visible(region, peer)),
        }
        Ok(())
    }

    /// The status of `name`, or of every region `peer` may see.
    pub fn status(&self, name: Option<&str>, peer: Peer) -> Result<Vec<RegionStatus>, ShmError> {
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
                .filter(|region| self.visible(region, peer))
                .map(|region| vec![describe(region)])
                .ok_or_else(|| ShmError::NotFound(name.to_owned())),
            None => Ok(regions
                .values()
                .filter(|region| self.visible(region, peer))
                .map(describe)
                .collect()),
        }
    }

    /// The region registered as `name`, if `peer` may see it and it is intact.
    pub fn get(&self, name: &str, peer: Peer) -> Result<Arc<Region>, ShmError> {
        self.check_enabled()?;
        let region = self
            .regions()
            .get(name)
            .filter(|region| self.visible(region, peer))
            .cloned()
            .ok_or_else(|| ShmError::NotFound(name.to_owned()))?;
        region.check_intact()?;
        Ok(region)
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
    use std::net::IpAddr;

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
    fn register_view_write_and_unregister() -> Result<(), ShmError> {
        let object = Object::new("rw", 64);
        let registry = ShmRegistry::new(ShmPolicy::Local);
        let local = Peer::Ip(IpAddr::from([127, 0, 0, 1]));
        registry.register("r", &object.0, 16, 32, local)?;
        assert!(matches!(
            registry.register("r", &object.0, 0, 8, local),
            Err(ShmError::AlreadyExists(_))
        ));
        let region = registry.get("r", local)?;
        region.write(4, &[1, 2, 3])?;
        let view = region.view(4, 3)?;
        assert_eq!(&view[..], &[1, 2, 3]);
        assert!(matches!(
            region.view(30, 4),
            Err(ShmError::WindowPastEnd { .. })
        ));
        assert!(matches!(region.view(u64::MAX, 2), Err(ShmError::Overflow)));

        registry.unregister(Some("r"), local)?;
        assert!(matches!(
            registry.get("r", local),
            Err(ShmError::NotFound(_))
        ));
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
        let region = registry.get("r", Peer::Local)?;
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

    fn truncate(key: &str, size: u64) {
        let fd = rustix::shm::open(key, rustix::shm::OFlags::RDWR, rustix::fs::Mode::empty())
            .expect("reopen");
        rustix::fs::ftruncate(&fd, size).expect("truncate");
    }

    #[test]
    fn a_fault_in_a_truncated_region_poisons_it_instead_of_killing_us() -> Result<(), ShmError> {
        let object = Object::new("fault", 3 * 4096);
        let registry = ShmRegistry::new(ShmPolicy::Any);
        registry.register("r", &object.0, 0, 3 * 4096, Peer::Local)?;
        registry.register("other", &object.0, 0, 4096, Peer::Local)?;
        let region = registry.get("r", Peer::Local)?;
        region.write(2 * 4096, &[7; 16])?;
        // Checked now, read later: the window a runtime thread holds.
        let view = region.view(2 * 4096, 16)?;
        truncate(&object.0, 4096);
        // The page behind the view is gone: the read faults, the handler swaps in zeros.
        let seen = std::thread::spawn(move || view[0])
            .join()
            .expect("reader thread");
        assert_eq!(seen, 0);
        assert!(region.poisoned());
        assert!(matches!(region.check_intact(), Err(ShmError::Poisoned(_))));
        assert!(matches!(
            registry.get("r", Peer::Local),
            Err(ShmError::Poisoned(_))
        ));
        // Another region of the same object, still inside it, is untouched.
        let other = registry.get("other", Peer::Local)?;
        assert!(!other.poisoned());
        assert_eq!(&other.view(0, 4)?[..], &[0, 0, 0, 0]);
        // Registering again works.
        registry.unregister(Some("r"), Peer::Local)?;
        registry.register("r", &object.0, 0, 4096, Peer::Local)?;
        assert!(!registry.get("r", Peer::Local)?.poisoned());
        Ok(())
    }

    #[test]
    fn registration_checks_the_name() {
        let object = Object::new("names", 8);
        let registry = ShmRegistry::new(ShmPolicy::Local);
        assert!(matches!(
            registry.register("", &object.0, 0, 8, Peer::Local),
            Err(ShmError::InvalidName(_))
        ));
    }

    #[test]
    fn local_policy_confines_every_operation() -> Result<(), ShmError> {
        let object = Object::new("confine", 8);
        let registry = ShmRegistry::new(ShmPolicy::Local);
        let local = Peer::Ip(IpAddr::from([127, 0, 0, 1]));
        let remote = Peer::Ip(IpAddr::from([192, 0, 2, 7]));
        registry.register("mine", &object.0, 0, 8, local)?;
        assert!(registry.status(None, remote)?.is_empty());
        assert!(matches!(
            registry.status(Some("mine"), remote),
            Err(ShmError::NotFound(_))
        ));
        assert!(matches!(
            registry.get("mine", remote),
            Err(ShmError::NotFound(_))
        ));
        registry.unregister(Some("mine"), remote)?;
        registry.unregister(None, remote)?;
        assert_eq!(registry.status(None, local)?.len(), 1);
        registry.get("mine", local)?;
        // Under `any`, as in Triton, every peer sees every region.
        let open = ShmRegistry::new(ShmPolicy::Any);
        open.register("mine", &object.0, 0, 8, local)?;
        assert_eq!(open.status(None, remote)?.len(), 1);
        Ok(())
    }

    #[test]
    fn limits_refuse_clearly() -> Result<(), ShmError> {
        let object = Object::new("limits", 64);
        let limits = ShmLimits {
            max_regions: 2,
            max_bytes: 48,
        };
        let registry = ShmRegistry::with_limits(ShmPolicy::Local, limits);
        registry.register("a", &object.0, 0, 16, Peer::Local)?;
        assert!(matches!(
            registry.register("big", &object.0, 0, 64, Peer::Local),
            Err(ShmError::TooManyBytes { .. })
        ));
        registry.register("b", &object.0, 0, 16, Peer::Local)?;
        assert!(matches!(
            registry.register("c", &object.0, 0, 8, Peer::Local),
            Err(ShmError::TooManyRegions(2))
        ));
        registry.unregister(Some("a"), Peer::Local)?;
        registry.register("c", &object.0, 0, 8, Peer::Local)?;
        Ok(())
    }

    #[test]
    fn links_and_special_files_are_refused() {
        let target = Object::new("target", 8);
        let link = format!("tensorport-test-link-{}", std::process::id());
        let link_path = format!("/dev/shm/{link}");
        std::os::unix::fs::symlink(format!("/dev/shm{}", target.0), &link_path).expect("symlink");
        let dir = format!("tensorport-test-dir-{}", std::process::id());
        std::fs::create_dir(format!("/dev/shm/{dir}")).expect("dir");
        let fifo = format!("tensorport-test-fifo-{}", std::process::id());
        rustix::fs::mknodat(
            rustix::fs::CWD,
            format!("/dev/shm/{fifo}").as_str(),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("fifo");
        let registry = ShmRegistry::new(ShmPolicy::Local);
        let linked = registry.register("l", &format!("/{link}"), 0, 8, Peer::Local);
        let directory = registry.register("d", &format!("/{dir}"), 0, 8, Peer::Local);
        let piped = registry.register("f", &format!("/{fifo}"), 0, 8, Peer::Local);
        let _ = std::fs::remove_file(&link_path);
        let _ = std::fs::remove_dir(format!("/dev/shm/{dir}"));
        let _ = std::fs::remove_file(format!("/dev/shm/{fifo}"));
        assert!(
            matches!(piped, Err(ShmError::NotRegularFile { what: "a FIFO", .. })),
            "{piped:?}"
        );
        assert!(
            matches!(
                linked,
                Err(ShmError::NotRegularFile {
                    what: "a symbolic link",
                    ..
                })
            ),
            "{linked:?}"
        );
        assert!(
            matches!(
                directory,
                Err(ShmError::NotRegularFile {
                    what: "a directory",
                    ..
                })
            ),
            "{directory:?}"
        );
    }
}
