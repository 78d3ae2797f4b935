//! The one seam through which a test fault acts inside the claim loop
//! ([`crate::run::DeferredInit`]'s windows): the production value,
//! [`NoClaimHooks`], does nothing.

use memmap::PfnRange;

/// What happens at the points of the claim loop where a fault can act.
pub trait ClaimHooks: Send + Sync {
    /// Called once `window` was initialised through its claim: whether to
    /// initialise it once more, through the same counted init path but
    /// bypassing the claim, as a claim bug would.
    fn init_again(&self, window: PfnRange) -> bool;
}

/// The claim loop as it runs on every boot without `test_fault=`.
pub struct NoClaimHooks;

impl ClaimHooks for NoClaimHooks {
    fn init_again(&self, _: PfnRange) -> bool {
        false
    }
}
