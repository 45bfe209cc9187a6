//! A layer's own command-line switches, kept in its folder: each layer with
//! switches declares a `clap::Args` group and names it in
//! [`super::Layer::switches`]; the registry collects the groups into the
//! commands that record (`record`, `bench`, `serve`) as retis's collectors
//! register their own CLI sections. A layer reads its own group back with
//! [`Switches::get`], and no layer names another's.

use std::{any::Any, fmt};

/// The switches any layer may read: the frame's own group.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct CommonSwitches {
    /// Every event, not only counts: every packet at every hop (per-packet journeys; 64 MiB kernel ring buffer;
    /// implies --hops); with the path layer, also every rx interrupt's and tx kick's first frame
    /// through each stage of a VM's virtio path (path_packets: round trips, slowest packets). Cost: redis GET/SET over loopback kept 0.82 of its untraced throughput
    /// (default: 0.98), tracing cost 13.4 % of capacity (default: 3.7 %); docs/overhead.md.
    #[arg(long)]
    pub events: bool,
}

/// What a layer's switch group must be: a clap group with defaults.
pub trait Switch: clap::Args + clap::FromArgMatches + Default + Clone + fmt::Debug + Send + Sync + 'static {}
impl<T: clap::Args + clap::FromArgMatches + Default + Clone + fmt::Debug + Send + Sync + 'static> Switch for T {}

/// A switch group whatever its type.
trait AnySwitch: Any + fmt::Debug + Send + Sync {
    fn clone_box(&self) -> Box<dyn AnySwitch>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Switch> AnySwitch for T {
    fn clone_box(&self) -> Box<dyn AnySwitch> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// How the registry adds one layer's group to a command and reads it back.
#[derive(Clone, Copy)]
pub struct SwitchGroup {
    augment: fn(clap::Command) -> clap::Command,
    parse: fn(&clap::ArgMatches) -> Result<Box<dyn AnySwitch>, clap::Error>,
}

impl SwitchGroup {
    /// The group `T` (a layer's `clap::Args` struct).
    pub fn of<T: Switch>() -> SwitchGroup {
        SwitchGroup {
            augment: T::augment_args,
            parse: |m| Ok(Box::new(T::from_arg_matches(m)?)),
        }
    }

    pub fn augment(&self, cmd: clap::Command) -> clap::Command {
        (self.augment)(cmd)
    }
}

/// Every layer's switches as set for one recording; a group never set
/// reads as its defaults.
#[derive(Default)]
pub struct Switches(Vec<Box<dyn AnySwitch>>);

impl Switches {
    /// The groups read from a command line, in `groups`' order.
    pub fn parse(groups: &[SwitchGroup], m: &clap::ArgMatches) -> Result<Switches, clap::Error> {
        groups
            .iter()
            .map(|g| (g.parse)(m))
            .collect::<Result<_, _>>()
            .map(Switches)
    }

    /// Group `T` as set, or its defaults.
    pub fn get<T: Switch>(&self) -> T {
        self.find::<T>().cloned().unwrap_or_default()
    }

    /// Changes group `T` (for programs that embed vtrace).
    pub fn edit<T: Switch>(&mut self, change: impl FnOnce(&mut T)) {
        let at = match self.0.iter().position(|g| g.as_any().is::<T>()) {
            Some(at) => at,
            None => {
                self.0.push(Box::new(T::default()));
                self.0.len() - 1
            }
        };
        if let Some(group) = self.0[at].as_any_mut().downcast_mut::<T>() {
            change(group);
        }
    }

    fn find<T: Switch>(&self) -> Option<&T> {
        self.0.iter().find_map(|g| g.as_any().downcast_ref::<T>())
    }
}

impl Clone for Switches {
    fn clone(&self) -> Self {
        Switches(self.0.iter().map(|g| g.clone_box()).collect())
    }
}

impl fmt::Debug for Switches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.0).finish()
    }
}
