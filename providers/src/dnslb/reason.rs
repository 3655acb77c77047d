//! Condition reasons of the DNS provider.

use crate::provider::Reason;

/// Every target would leave the records: the last ones stay, so that the name never resolves to
/// nothing (their targets are drained and let go all the same).
pub const LAST_RECORDS_KEPT: Reason = Reason::problem("LastRecordsKept");
/// A target's only address is a DNS name: a record of the name can only be an IP address.
pub const TARGET_ADDRESS_NOT_IP: Reason = Reason::problem("TargetAddressNotIP");

/// Every reason above.
pub const ALL: &[Reason] = &[LAST_RECORDS_KEPT, TARGET_ADDRESS_NOT_IP];
