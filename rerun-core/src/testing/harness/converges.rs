//! `check_converges`: the harness for functions marked `#[converges]`, which have no key
//! because running them twice is harmless by construction.

use std::fmt::{self, Debug, Display};

use super::report::side_by_side;

/// A `#[converges]` function that did not converge: the state after one run and after two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The world after one run.
    pub once: String,
    /// The world after two runs (or the error of the second).
    pub twice: String,
}

impl Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "running it twice does not end where running it once does:"
        )?;
        f.write_str(&side_by_side(
            "run once",
            &self.once,
            "run twice",
            &self.twice,
        ))
    }
}

impl std::error::Error for Divergence {}

/// Checks a function that claims to converge (`#[converges("…")]`): running it twice on a
/// fresh world ends in the same state as running it once, and neither run fails.
///
/// `world` builds a fresh world (the state itself, compared with `==`); `op` runs the function
/// on it.
///
/// ```
/// use rerun_core::testing::check_converges;
///
/// #[derive(Debug, PartialEq, Default)]
/// struct User { verified: bool, logins: u32 }
///
/// // Sets a flag: converges.
/// check_converges(|u: &mut User| { u.verified = true; Ok::<_, String>(()) }, User::default)?;
///
/// // Increments a counter: does not.
/// let err = check_converges(|u: &mut User| { u.logins += 1; Ok::<_, String>(()) }, User::default)
///     .unwrap_err();
/// assert!(err.to_string().contains("logins: 1"));
/// # Ok::<(), rerun_core::testing::Divergence>(())
/// ```
pub fn check_converges<W, R, E>(
    mut op: impl FnMut(&mut W) -> Result<R, E>,
    world: impl Fn() -> W,
) -> Result<(), Divergence>
where
    W: PartialEq + Debug,
    E: Display,
{
    let mut once = world();
    if let Err(e) = op(&mut once) {
        return Err(Divergence {
            once: format!("the first run failed: {e}"),
            twice: String::new(),
        });
    }
    let mut twice = world();
    for run in ["first", "second"] {
        if let Err(e) = op(&mut twice) {
            return Err(Divergence {
                once: format!("{once:#?}"),
                twice: format!("the {run} run failed: {e}"),
            });
        }
    }
    if once == twice {
        Ok(())
    } else {
        Err(Divergence {
            once: format!("{once:#?}"),
            twice: format!("{twice:#?}"),
        })
    }
}
