//! Who a shared-memory request came from, and which side of the machine's boundary that is:
//! a region remembers the class of the peer that registered it, and under `--shm local` every
//! operation sees only the regions of its own class.

use std::net::IpAddr;

/// Where a request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Ip(IpAddr),
    /// A Unix socket or an in-process caller.
    Local,
    Unknown,
}

/// Which side of the machine's boundary a peer is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerClass {
    Local,
    Remote,
}

impl Peer {
    /// Loopback addresses, IPv4-mapped ones (`::ffff:127.0.0.1`, as a dual-stack listener
    /// reports an IPv4 client) included, are local; an unknown address is not.
    pub fn class(self) -> PeerClass {
        match self {
            Self::Ip(ip) if ip.to_canonical().is_loopback() => PeerClass::Local,
            Self::Local => PeerClass::Local,
            Self::Ip(_) | Self::Unknown => PeerClass::Remote,
        }
    }

    /// The peer as a refusal names it.
    pub(super) fn describe(self) -> String {
        match self {
            Self::Ip(ip) => ip.to_canonical().to_string(),
            Self::Local => "this machine".into(),
            Self::Unknown => "an unknown address".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_loopback_is_local() {
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("address");
        assert_eq!(Peer::Ip(mapped).class(), PeerClass::Local);
        assert_eq!(
            Peer::Ip("::1".parse().expect("address")).class(),
            PeerClass::Local
        );
        let remote: IpAddr = "::ffff:192.0.2.7".parse().expect("address");
        assert_eq!(Peer::Ip(remote).class(), PeerClass::Remote);
        assert_eq!(Peer::Unknown.class(), PeerClass::Remote);
    }
}
