//! Live figures of a running producer, as `batchcast status` shows them.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::wire::{
    self, FrameReader, Hello, Role, ToConsumer, ToProducer, MAGIC, PROTOCOL_VERSION,
};

/// A producer's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The producer's name.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// Seconds since it started.
    pub uptime_secs: f64,
    /// Slots in the window.
    pub slots: u32,
    /// Bytes per slot (0 before the first batch sized the arena).
    pub slot_size: u64,
    /// Current (or last) epoch.
    pub epoch: u64,
    /// Producer batches published so far.
    pub published: u64,
    /// Producer batches per second over the last few seconds.
    pub batches_per_sec: f64,
    /// Seconds the producer spent blocked on a full window.
    pub blocked_secs: f64,
    /// The nominal batch size, once known.
    pub batch_size: Option<u64>,
    /// Rows per epoch, when known.
    pub samples_per_epoch: Option<u64>,
    /// What the producer says about its stream.
    pub stream: crate::stream::StreamSpec,
    /// One entry per connected consumer.
    pub consumers: Vec<ConsumerStatus>,
}

/// One consumer's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConsumerStatus {
    /// Id given at join.
    pub id: u64,
    /// Its pid (from the socket's peer credentials).
    pub pid: u32,
    /// What it called itself.
    pub label: String,
    /// Its batch size (`None`: the producer's).
    pub batch_size: Option<u64>,
    /// Its join policy.
    pub join: String,
    /// `following`, `waiting` (for the next epoch) or `pending` (no arena yet).
    pub state: String,
    /// Sequence number of the newest batch sent to it.
    pub position: Option<u64>,
    /// Producer batches it holds (sent, not yet released).
    pub lag: u64,
    /// Consumer batches it has handed to user code.
    pub delivered: u64,
    /// Seconds it has spent waiting for data.
    pub wait_secs: f64,
}

/// Asks the producer of `endpoint` for its figures.
pub fn query(endpoint: &Endpoint, timeout: Duration) -> Result<StatusReport> {
    let path = endpoint.socket_path();
    let sock = UnixStream::connect(&path).map_err(|_| Error::ProducerNotFound {
        name: endpoint.name().to_owned(),
        socket: path.clone(),
        waited_secs: None,
    })?;
    sock.set_read_timeout(Some(timeout))
        .map_err(|e| Error::io("cannot set a socket timeout", e))?;
    let hello = ToProducer::Hello(Hello {
        magic: MAGIC,
        version: PROTOCOL_VERSION,
        role: Role::Status,
    });
    wire::send_frame(&sock, &wire::encode(&hello)?)?;
    let mut reader = FrameReader::new();
    loop {
        if let Some(msg) = reader.next_frame::<ToConsumer>()? {
            return match msg {
                ToConsumer::Status(report) => Ok(report),
                ToConsumer::Refused(reason) => Err(Error::JoinRefused {
                    name: endpoint.name().to_owned(),
                    reason,
                }),
                other => Err(Error::Protocol(format!(
                    "unexpected reply to a status query: {other:?}"
                ))),
            };
        }
        match reader.fill(&sock, true, None)? {
            wire::Fill::Data => {}
            wire::Fill::WouldBlock => {
                return Err(Error::Protocol(format!(
                    "producer {:?} did not answer a status query within {:.1} s",
                    endpoint.name(),
                    timeout.as_secs_f64()
                )))
            }
            wire::Fill::Eof => {
                return Err(Error::ProducerGone {
                    name: endpoint.name().to_owned(),
                })
            }
        }
    }
}
