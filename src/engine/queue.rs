//! Queued processing: a worker takes a due job under a lease, runs its
//! operation, and ends the job in the same transaction as the operation's
//! writes, fenced by that lease, exactly as the inline path completes a key.
//! A failure is retried with exponential backoff and jitter until the
//! endpoint's `max_attempts` or `max_age`, then the job is `dead` with its
//! last error kept.

use super::{Engine, EngineError, Operation, OperationError, to_delta};
use crate::log_text::escaped;
use crate::store::queue::{DEAD, DONE, JobEnd, RETRYING, TakenJob};
use crate::store::{Claimed, Store};
use chrono::NaiveDateTime;
use rand::Rng;
use std::time::Duration;

/// How an endpoint's failed jobs are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Past this age (from receipt) a failure is final.
    pub max_age: Duration,
    /// The delay after the first failure; it doubles per attempt.
    pub backoff: Duration,
    /// The longest delay.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 25,
            max_age: Duration::from_secs(3 * 24 * 3600),
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(3600),
        }
    }
}

impl RetryPolicy {
    /// The delay after `attempt` failed: `backoff * 2^(attempt-1)`, capped,
    /// then jittered into its upper half, so that jobs that failed together
    /// (a downstream outage) do not all come back at the same instant.
    pub fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        let full = self
            .backoff
            .saturating_mul(1u32 << exponent)
            .min(self.backoff_max);
        full.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

/// A job a worker holds.
pub struct Job {
    store: Store,
    taken: TakenJob,
    owner: String,
    lease: Duration,
}

/// How a job's attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    Done,
    /// Failed; due again at this time.
    Retrying {
        next_run_at: NaiveDateTime,
    },
    /// Failed for good: the operation refused the event, or the attempts or
    /// the age ran out.
    Dead {
        error: String,
    },
    /// The lease ran out and another worker took the job: this attempt's
    /// writes were rolled back.
    LeaseLost,
}

impl Engine {
    /// Takes the next due job, if any, under a lease of this engine's
    /// length, and commits that at once so that other workers see it held.
    pub async fn take_job(&self) -> Result<Option<Job>, EngineError> {
        let now = self.now();
        let owner = format!("queue/{}", self.new_owner());
        let until = now + to_delta(self.inner.options.lease);
        let mut tx = self.store().begin().await?;
        let taken = match tx.conn().take_due(&owner, until, now).await {
            Ok(taken) => taken,
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e.into());
            }
        };
        tx.commit().await?;
        Ok(taken.map(|taken| Job {
            store: self.store().clone(),
            taken,
            owner,
            lease: self.inner.options.lease,
        }))
    }
}

impl Job {
    pub fn taken(&self) -> &TakenJob {
        &self.taken
    }

    /// The claim the operation runs under (its `attempt` is the job's).
    pub fn claimed(&self) -> Claimed {
        Claimed {
            delivery_id: self.taken.delivery_id.clone(),
            lease_owner: self.owner.clone(),
            attempt: self.taken.attempts,
            taken_over: false,
        }
    }

    /// Runs `operation` once for this job: its outside work first, under a
    /// renewed lease; then its database writes, the job's end and (for an
    /// ordered endpoint) the newest event time, in one transaction fenced
    /// by the lease.
    pub async fn run(
        self,
        operation: &dyn Operation,
        policy: &RetryPolicy,
    ) -> Result<JobOutcome, EngineError> {
        let claimed = self.claimed();
        let renewal = self.keep_alive();
        let external = if operation.has_external_effects() {
            operation.run_external(&claimed).await
        } else {
            Ok(())
        };
        let result = match external {
            Ok(()) => self.finish(operation, &claimed).await,
            Err(error) => Err(error),
        };
        renewal.abort();
        match result {
            Ok(true) => Ok(JobOutcome::Done),
            Ok(false) => Ok(JobOutcome::LeaseLost),
            Err(error) => self.fail(error, policy).await,
        }
    }

    /// The operation's writes and the job's end, committed together; `false`
    /// when the lease was lost (everything rolled back).
    async fn finish(
        &self,
        operation: &dyn Operation,
        claimed: &Claimed,
    ) -> Result<bool, OperationError> {
        let mut tx = self.store.begin().await.map_err(OperationError::Store)?;
        let result = operation.run(tx.conn(), claimed).await;
        let ended = match result {
            Ok(_) => self.end_done(tx.conn()).await,
            Err(error) => Err(error),
        };
        match ended {
            Ok(true) => {
                tx.commit().await.map_err(OperationError::Store)?;
                Ok(true)
            }
            Ok(false) => {
                let _ = tx.rollback().await;
                Ok(false)
            }
            Err(error) => {
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }

    async fn end_done(&self, conn: &mut crate::store::DbConn) -> Result<bool, OperationError> {
        let now = self.store.clock().naive_now();
        let t = &self.taken;
        if let (Some(key), Some(time)) = (&t.ordering_key, t.event_time) {
            conn.record_event_time(&t.endpoint, key, time)
                .await
                .map_err(OperationError::Store)?;
        }
        let end = JobEnd {
            state: DONE,
            next_run_at: now,
            error: None,
            finished_at: Some(now),
        };
        conn.end_job(&t.endpoint, &t.delivery_id, &self.owner, &end)
            .await
            .map_err(OperationError::Store)
    }

    /// Schedules the retry, or buries the job, and records why.
    async fn fail(
        self,
        error: OperationError,
        policy: &RetryPolicy,
    ) -> Result<JobOutcome, EngineError> {
        let now = self.store.clock().naive_now();
        let t = &self.taken;
        let (text, permanent) = match &error {
            // The operation found the event can never succeed.
            OperationError::Rejected(response) => {
                (String::from_utf8_lossy(&response.body).into_owned(), true)
            }
            OperationError::Failed(e) => (e.to_string(), false),
            OperationError::Store(e) => (e.to_string(), false),
        };
        // Kept for operators, capped: a downstream's whole answer is not.
        let text: String = text.chars().take(2000).collect();
        let age = (now - t.received_at).to_std().unwrap_or_default();
        let attempts = u32::try_from(t.attempts).unwrap_or(u32::MAX);
        let dead = permanent || attempts >= policy.max_attempts || age >= policy.max_age;
        let next_run_at = if dead {
            now
        } else {
            now + to_delta(policy.delay(attempts, rand::rng().random::<f64>()))
        };
        let end = JobEnd {
            state: if dead { DEAD } else { RETRYING },
            next_run_at,
            error: Some(&text),
            finished_at: dead.then_some(now),
        };
        let mut tx = self.store.begin().await?;
        let ended = tx
            .conn()
            .end_job(&t.endpoint, &t.delivery_id, &self.owner, &end)
            .await;
        let kind = if dead { "dead" } else { "retry-scheduled" };
        let detail = format!("attempt {}: {text}", t.attempts);
        let recorded = match ended {
            Ok(true) => tx
                .conn()
                .record_history(&t.endpoint, &t.delivery_id, kind, None, Some(&detail), now)
                .await
                .map(|()| true),
            other => other,
        };
        match recorded {
            Ok(true) => tx.commit().await?,
            Ok(false) => {
                let _ = tx.rollback().await;
                return Ok(JobOutcome::LeaseLost);
            }
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e.into());
            }
        }
        tracing::warn!(
            endpoint = %t.endpoint,
            delivery_id = %t.delivery_id,
            attempt = t.attempts,
            error = %escaped(&text),
            "{}",
            if dead { "queued delivery is dead" } else { "queued delivery failed; retry scheduled" }
        );
        Ok(if dead {
            JobOutcome::Dead { error: text }
        } else {
            JobOutcome::Retrying { next_run_at }
        })
    }

    /// Renews the lease while the operation works; a lost lease is found
    /// by the fenced end.
    fn keep_alive(&self) -> tokio::task::JoinHandle<()> {
        let store = self.store.clone();
        let (endpoint, delivery_id) = (self.taken.endpoint.clone(), self.taken.delivery_id.clone());
        let owner = self.owner.clone();
        let lease = self.lease;
        tokio::spawn(async move {
            let every = (lease / 3).max(Duration::from_millis(100));
            loop {
                tokio::time::sleep(every).await;
                let until = store.clock().naive_now() + to_delta(lease);
                let renewed = match store.conn().await {
                    Ok(mut conn) => conn.renew_job(&endpoint, &delivery_id, &owner, until).await,
                    Err(e) => Err(e),
                };
                match renewed {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(error) => tracing::warn!(%error, "could not renew a job's lease"),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_is_capped_and_jittered_into_its_upper_half() {
        let policy = RetryPolicy {
            backoff: Duration::from_secs(10),
            backoff_max: Duration::from_secs(60),
            ..RetryPolicy::default()
        };
        assert_eq!(policy.delay(1, 1.0), Duration::from_secs(10));
        assert_eq!(policy.delay(2, 1.0), Duration::from_secs(20));
        assert_eq!(policy.delay(3, 1.0), Duration::from_secs(40));
        assert_eq!(policy.delay(4, 1.0), Duration::from_secs(60));
        assert_eq!(policy.delay(40, 1.0), Duration::from_secs(60));
        assert_eq!(policy.delay(2, 0.0), Duration::from_secs(10));
        assert_eq!(policy.delay(2, 0.5), Duration::from_secs(15));
    }
}
