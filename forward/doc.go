// Package forward delivers claimed events to their local HTTP handlers: leased
// delivery, retries with backoff, dead letters, and the sweeper that reclaims
// expired leases, ends retention buckets and drops payloads.
//
// # What it owns
//
// A Forwarder runs on the Raft leader only (the caller starts Run when the node
// becomes leader, after a Barrier, and cancels it when leadership is lost). It
// owns three loops inside Run:
//
//   - the dispatcher leases due pending events from the Store, never more than
//     there are free workers, and hands them to a pool of workers that grows
//     past Options.Workers while the pool is what limits delivery and the
//     handlers answer more for it (poolsize.go). It
//     leases again when Options.Wake is signalled, on every PollInterval tick
//     (which is also how retries that became due are found), and when a worker
//     frees up while the last lease filled every free slot. One lease is in
//     flight at a time, on its own goroutine: meanwhile the dispatcher hands
//     the events claims leased to the workers;
//   - the workers POST each event to its source's Target and record the outcome
//     with Complete (2xx) or Fail (anything else, with the retry delay and the
//     attempt limit decided here, on the leader, and carried in the command);
//   - the sweeper calls Reclaim every SweepInterval (with Options.Limits'
//     Horizon: schedules stamped by a leader whose clock ran ahead are
//     repaired; a reload that lowers it takes effect once the old horizon
//     has passed, so leases granted under it are not cut), and Expire then DropPayloads every ExpireInterval; each dead
//     letter Expire deleted is logged at warn with its key and reported to
//     Options.DeadExpired. Its errors are logged, never fatal. The targets'
//     DeadRetention and PayloadRetention ride in Fail and Complete.
//
// When Run's context ends, nothing more is leased, in-flight requests are
// cancelled, and their events are neither completed nor failed: their leases
// expire and the next leader's sweeper returns them to pending. A leader
// that steps down on purpose calls Drain first (drain.go), so that its
// handlers' answers are recorded before it hands over.
//
// # The contract with handlers: at least once, fenced
//
// A handler receives the body exactly as the provider sent it, with
//
//	Content-Type             as received (stored with the event)
//	Idempotency-Key          the event's scoped key, e.g. "stripe-live:evt_123"
//	Oncehook-Event-Key       the same key
//	Oncehook-Source          the source name
//	Oncehook-Attempt         the engine's Attempts: 1 on the first delivery, 2 on the
//	                         next (after a failure or an expired lease), ...
//	Oncehook-Fencing-Token   the lease's fencing token (the Raft index of the lease, plus a base
//	                         a restore raises: it only grows)
//	Oncehook-Last-Step       the last Oncehook-Step the handler answered for this
//	                         event (absent until it answers one)
//	Oncehook-Replayed-At     when the event was last replayed (RFC 3339, UTC; absent
//	                         on an event never replayed)
//
// and every other header stored with the event (the source's forward_headers).
// The Oncehook headers and Idempotency-Key always override a stored header of
// the same name.
//
// A handler may answer Oncehook-Step (with any status): a valid step (1 to
// engine.MaxStepLen printable ASCII bytes) goes into the Complete or Fail that
// records the answer, through Raft; an invalid one is logged and dropped so
// that the answer is still recorded. A reclaimed lease records no step.
//
// Delivery is at least once. A handler is called again after it failed, timed
// out, or held the event longer than its lease (a lease is a lock, and leased
// locks cannot give mutual exclusion: a paused or slow worker can still be
// running after the sweeper reclaimed its event). The fencing token makes that
// safe: it grows with every lease of an event, so a handler that writes to a
// store can remember the highest token it has seen for a key and reject an
// older one. On our side, a late 2xx under an old token is rejected by the
// engine (engine.ErrStaleToken) and counted as "fenced", never as done over the
// newer lease.
//
// Any 3xx is a failure (redirects are never followed), as is any non-2xx status,
// a timeout or a connection error. A handler that answers 429 or 503 with
// Retry-After in seconds is retried after that delay, kept within the target's
// [BackoffMin, max(BackoffMax, MaxHold)], and holds its whole source (below).
// The hold is this leader's memory; the event's own retry time is replicated,
// so the event that got the answer waits for it under a new leader too.
//
// # Rate limits
//
// A Target's MaxRate caps how many deliveries per second start to its
// handler, with a token bucket of Burst tokens per source. A Run's bucket
// starts with one token: a new leader does not know what the previous one sent
// just before, so it never opens with a whole burst. A reload that changes a
// source's rate or burst keeps the share of its bucket in use (an idle source
// keeps its burst; one whose rate it turns on starts with one token), and its
// parked events are booked again under the new rate. A 429 or 503 with
// Retry-After also holds the whole source: no delivery of it starts before
// that time, capped at MaxHold, and the hold is logged once at info.
//
// Waiting must not cost attempts or lease time. Nothing in the Store gives
// an event back without counting an attempt (Lease counts it; Fail and
// Reclaim keep it). So:
//
//   - a leased event that must wait does not take a worker: the dispatcher
//     parks it with its slot booked in its source's bucket and hands it to a
//     worker when the slot comes, so other sources keep every worker;
//   - it waits only when its slot comes before its lease's end minus its
//     Timeout, so the delivery still fits in the lease it was leased under;
//   - the dispatcher limits how many events of a throttled source are in
//     flight instead of handing them back: a lease takes no more of its
//     events than it can still book slots for within half of
//     (its Lease, or DefaultLease, - Timeout) (a hard quota), none while its slots are
//     booked further ahead, when its claims do not carry their leases
//     either; so a steady load above the rate waits in pending, oldest
//     first, and other sources' events are leased as usual;
//   - holds do not stop leasing (a five-minute hold must not stop other
//     sources). An event that cannot start inside its lease in any case (a
//     hold longer than the lease, a per-event lease shorter than the default,
//     a rate lowered by a reload) is handed back (Store.HandBack), reason
//     ReasonRateLimited and the wait as its retry delay: the attempt the
//     lease counted is refunded, so a hand-back never makes the event dead.
//
// Options.RateLimited reports every delivery that waited, with how long.
//
// # Sharing the workers
//
// A source's events hold workers for as long as its handler takes, so a slow
// handler with a backlog would hold every worker, and the other sources'
// events, though due, would wait for its backlog. Leases therefore carry
// quotas (engine Command.Quotas and Share): while another source has events
// due, a source gets at most its share of the pool, half the workers, and
// the workers that free up go to the other sources' due events first. A
// source alone gets every worker (the quotas are soft: a lease takes past a
// quota when nothing else is due). Claims follow the same rule: a claim of a
// source that holds its share carries no lease while another source's events
// wait (ReserveSlot; the engine's Result.Waiting says which sources a lease
// left due events of).
//
// A source past its share also leaves the last eighth of the pool free (the
// spare workers, engine Command.Spare) while another source is active, or
// whenever more than one source is configured (Options.Sources): the other
// source's next events then start at once instead of waiting for one of the
// slow handler's requests to end.
//
// # Waking sync-mode waiters
//
// A sync-mode intake answers the provider with the handler's status and body,
// so it waits for the event's outcome. The intake of any node may be waiting,
// while only the leader forwards. The outcome therefore has two paths:
//
//   - the durable one: every node applies the Complete (with the cached
//     Response) or Fail through its FSM. The cluster should wake a per-key
//     waiter registry after applying those commands, and the waiter reads the
//     event (engine Get) to answer. This works on followers, and across a change
//     of leader.
//   - the fast one on the leader: Options.OnFinish hands over the Finish of
//     each attempt as soon as the Store call returns, including what a failed
//     attempt got (status, reason), which the engine keeps only as LastError.
//
// A waiter should select on both, plus its own deadline. OnFinish must not
// block: a non-blocking send or a close of a per-key channel is enough.
//
// # Imports
//
// forward imports engine for its types and errors only, and sees the replicated
// store through the small Store interface declared here. It must not import
// cluster, providers or fasthttp; outgoing calls use net/http.
package forward
