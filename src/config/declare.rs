//! The machinery behind `settings.rs`: one `declare_config!` invocation names every field of
//! `Config`, and for a setting also its flag, its KubeletConfiguration field, its /configz
//! rendering and its rule, so adding a setting is one entry plus the code that uses it.
//!
//! A `macro_rules!` macro rather than a table of values or a derive: the settings have
//! different Rust types (a table would need one value type or boxed closures per entry, and
//! would give up the typed field access every other module uses), and a derive would need a
//! proc-macro crate of its own for what is a dozen generated items.
//!
//! An entry reads
//!
//! ```text
//! /// doc
//! pub name: Type = default
//!     , flag("flag-name", "VALUE", "help line", parse_fn)   // "" as VALUE: a boolean flag
//!     , file("dotted.fieldPath", read_fn, show_fn)          // show_fn optional: /configz
//!     , check(rule_fn)
//!     ;
//! ```
//!
//! each clause optional, in that order. The `others` section holds the fields whose reading
//! does not fit one flag and one field (maps whose first flag replaces the file's, settings
//! that default from another, paths the flags and file spell differently); they are applied
//! by hand in `mod.rs`, `file.rs` and `configz.rs`.

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::flags::{FlagKind, FlagSpec, Support};

/// What the declaration says about one setting, for the tests of the declarations.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Declared {
    /// The `Config` field.
    pub field: &'static str,
    pub flag: Option<&'static str>,
    /// Dotted path in the KubeletConfiguration file.
    pub file: Option<&'static str>,
    pub configz: bool,
}

/// Why a declared setting's value breaks its rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broken {
    /// The value as the message shows it.
    pub value: String,
    pub reason: String,
}

impl Broken {
    pub(crate) fn new(value: impl ToString, reason: impl Into<String>) -> Broken {
        Broken {
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn into_config_error(self, setting: &'static str) -> ConfigError {
        ConfigError::Invalid {
            setting,
            value: self.value,
            reason: self.reason,
        }
    }
}

/// A boolean flag is declared with an empty value name.
pub(crate) const fn declared_flag(
    name: &'static str,
    value_name: &'static str,
    help: &'static str,
) -> FlagSpec {
    FlagSpec {
        name,
        short: None,
        kind: if value_name.is_empty() {
            FlagKind::Bool
        } else {
            FlagKind::Value
        },
        value_name,
        help,
        support: Support::Implemented,
    }
}

/// Puts `value` at a dotted path of the /configz document, making the mappings on the way.
pub(crate) fn insert_at(out: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            out.insert(path.to_string(), value);
        }
        Some((head, rest)) => {
            let inner = out
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = inner {
                insert_at(map, rest, value);
            }
        }
    }
}

/// `Option` of an optional clause's literal.
#[cfg(test)]
macro_rules! optional_literal {
    () => {
        None
    };
    ($x:literal) => {
        Some($x)
    };
}

/// The name an error gives a setting: `field (--flag)`, or the one it has.
macro_rules! setting_label {
    ([$field:literal] [$flag:literal]) => {
        concat!($field, " (--", $flag, ")")
    };
    ([$field:literal] []) => {
        $field
    };
    ([] [$flag:literal]) => {
        concat!("--", $flag)
    };
    ([] []) => {
        ""
    };
}

macro_rules! check_setting {
    ($value:expr, [], $label:expr) => {};
    ($value:expr, [$rule:path], $label:expr) => {
        $rule(&$value).map_err(|broken| broken.into_config_error($label))?;
    };
}

#[cfg(test)]
macro_rules! has_configz {
    ([]) => {
        false
    };
    ([$show:path]) => {
        true
    };
}

macro_rules! declare_config {
    (
        defaults($with_file:ident);
        settings {
            $(
                $(#[$attr:meta])*
                $vis:vis $name:ident : $ty:ty = $default:expr
                $(, flag($flag:literal, $value_name:literal, $help:literal, $parse:path))?
                $(, file($field:literal, $read:path $(, $show:path)?))?
                $(, check($rule:path))?
                ;
            )*
        }
        others {
            $(
                $(#[$oattr:meta])*
                $ovis:vis $oname:ident : $oty:ty = $odefault:expr;
            )*
        }
    ) => {
        /// The agent's effective configuration: defaults, then the config file and its
        /// drop-ins, then flags.
        #[derive(Debug, Clone)]
        pub struct Config {
            $( $(#[$attr])* $vis $name: $ty, )*
            $( $(#[$oattr])* $ovis $oname: $oty, )*
        }

        impl Config {
            /// Upstream's v1beta1 defaults plus the agent's own; `node_name` is left empty.
            /// `with_config_file` selects between the v1beta1 defaults and the kubelet's
            /// legacy command-line defaults (`applyLegacyDefaults`): read-only port 10255,
            /// anonymous authentication on, token webhook off, authorization AlwaysAllow.
            pub fn defaults($with_file: bool) -> Config {
                Config {
                    $( $name: $default, )*
                    $( $oname: $odefault, )*
                }
            }

            /// Applies a declared setting's flag; `None` when `name` is not one.
            pub(crate) fn apply_declared_flag(
                &mut self,
                name: &str,
                value: &str,
            ) -> Option<Result<(), $crate::config::codec::ValueError>> {
                match name {
                    $( $( $flag => Some($parse(value).map(|v| self.$name = v)), )? )*
                    _ => None,
                }
            }

            /// Applies what the files set of the declared settings.
            pub(crate) fn apply_declared_file(&mut self, file: DeclaredFile) {
                $( $(
                    if let Some(value) = file.$name {
                        let _: &str = $field;
                        self.$name = value;
                    }
                )? )*
            }

            /// The declared settings' part of /configz.
            pub(crate) fn declared_configz(
                &self,
                out: &mut serde_json::Map<String, serde_json::Value>,
            ) {
                $( $( $(
                    if let Some(value) = $show(&self.$name) {
                        $crate::config::declare::insert_at(out, $field, value);
                    }
                )? )? )*
            }

            /// The declared settings' own rules, in declaration order.
            pub(crate) fn validate_declared(&self) -> Result<(), ConfigError> {
                $(
                    check_setting!(
                        self.$name,
                        [$($rule)?],
                        setting_label!([$($field)?] [$($flag)?])
                    );
                )*
                Ok(())
            }
        }

        /// The declared settings the files set; `None`: not set, or set to a value that
        /// upstream's defaulting replaces.
        #[derive(Debug, Default, Clone, PartialEq)]
        pub(crate) struct DeclaredFile {
            $( $( #[doc = $field] pub $name: Option<$ty>, )? )*
        }

        impl DeclaredFile {
            /// Reads the declared fields of a KubeletConfiguration document.
            pub(crate) fn read(
                reader: &$crate::config::file::FieldReader<'_>,
            ) -> Result<DeclaredFile, ConfigError> {
                Ok(DeclaredFile {
                    $( $( $name: reader.read_at($field, $read)?, )? )*
                })
            }
        }

        /// The flags of the declared settings, in declaration order.
        pub(crate) const DECLARED_FLAGS: &[$crate::config::flags::FlagSpec] = &[
            $( $( $crate::config::declare::declared_flag($flag, $value_name, $help), )? )*
        ];

        /// Every declared setting.
        #[cfg(test)]
        pub(crate) const DECLARED: &[$crate::config::declare::Declared] = &[
            $(
                $crate::config::declare::Declared {
                    field: stringify!($name),
                    flag: optional_literal!($($flag)?),
                    file: optional_literal!($($field)?),
                    configz: has_configz!([$($($show)?)?]),
                },
            )*
        ];
    };
}
