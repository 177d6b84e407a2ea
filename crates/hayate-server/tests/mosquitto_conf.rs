//! Mosquitto configuration files translated into Hayate's configuration: every key family,
//! every class of error (unknown key, malformed value, key outside its section, value that
//! cannot be honoured), the single warning line, `hayate config convert`'s TOML read back,
//! and real-world files (Debian's, and files written the way Mosquitto's manual shows).

#[path = "mosquitto_conf/bridges.rs"]
mod bridges;
#[path = "mosquitto_conf/common.rs"]
mod common;
#[path = "mosquitto_conf/files.rs"]
mod files;
#[path = "mosquitto_conf/limits.rs"]
mod limits;
#[path = "mosquitto_conf/listeners.rs"]
mod listeners;
#[path = "mosquitto_conf/security.rs"]
mod security;
#[path = "mosquitto_conf/served.rs"]
mod served;
