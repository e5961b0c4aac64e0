/*
 * replica.pml: the protocol by which a hot standby computes stream_seq's
 * horizon (src/replica.c, src/shmem.c), as a Promela model for spin.
 *
 * Primary: writers take an xid, perhaps take a number (under the stream's
 * lock: counter, entry and the NUMBERS record in one step, so that the
 * stream's records are in number order), and commit, abort, or vanish in
 * a crash.  PostgreSQL logs running transactions (RUNXACTS) now and then
 * and after a crash.  The lister writes rounds: START (next xid), the
 * stream's LISTING (counter and open reservations, under the lock), END.
 * WAL is shipped and replayed in order.  The stream's slot lock is
 * modelled by the atomic steps that hold it.
 *
 * Standby: starts at a RUNXACTS record, as PostgreSQL's hot standby does,
 * tracks known-running xids the way KnownAssignedXids does (every xid up
 * to one seen in a record is assumed running until its commit or abort,
 * or until a RUNXACTS expires it), and replays the stream's records into a
 * list.  A reader takes a snapshot (statement or REPEATABLE READ: it may
 * be used long after it was taken), and later asks for the horizon, which
 * the standby computes as src/shmem.c does, refusing when it is not yet
 * complete or the snapshot predates its knowledge.
 *
 * What a standby computes depends only on the prefix of the WAL it has
 * replayed.  So once the primary's run is over (every interleaving of its
 * writers, lister, running-transactions records, crash and restart, or a
 * stop for good: a promotion), check_all() tries, deterministically, every
 * standby: every start record s, every replay position p1 >= s at which
 * the reader takes its snapshot (a restart is a start at an earlier such
 * record, so this covers restarts), and every position p2 >= p1 at which
 * it asks for the horizon.  After a promotion a snapshot taken during
 * recovery is refused (horizon.c); that needs no model.
 *
 * Safety: a row that commits with a number below a horizon given to the
 * reader is visible in the reader's snapshot.  Progress: if the primary is
 * up at the end, once a round is written and replayed, a fresh snapshot's
 * horizon is the counter, for every start before that round.
 *
 * Variants that must fail (make check-model runs them):
 *	-DBROKEN_NO_ROUND		the standby answers before a round is replayed
 *	-DBROKEN_NO_PREDATES	no refusal of snapshots older than the knowledge
 *	-DBROKEN_LOG_LATER		the NUMBERS record written after the lock is released
 *	-DBROKEN_PREDATES_ARRAY_ONLY	the refusal looks at the snapshot's array
 *							only, not at the xids from its xmax on
 */

#ifndef NW
#define NW		2			/* writers */
#endif
#define MAXWAL	20
#ifndef ROUNDS
#define ROUNDS	1			/* rounds the lister writes during the run */
#endif
#define NONE	255

mtype = { NUMBERS, COMMIT, ABORT, RSTART, LISTING, REND, RUNXACTS };

typedef Rec {
	mtype kind;
	byte w;					/* writer, for NUMBERS, COMMIT, ABORT */
	byte lo;				/* NUMBERS */
	byte nxt;				/* NUMBERS, LISTING: the counter */
	byte set;				/* LISTING: open writers; RUNXACTS: running */
	byte xid;				/* RSTART, RUNXACTS: next xid */
	byte lc;				/* RUNXACTS: latest completed xid */
};

Rec wal[MAXWAL];
byte wlen = 0;

/* primary */
#define P_IDLE		0
#define P_XID		1		/* has an xid */
#define P_HOLDS		2		/* holds a number, entry open */
#define P_COMMITTED 3
#define P_ABORTED	4
#define P_VANISHED	5
byte pstate[NW];
byte xid[NW];				/* NONE until assigned */
byte lo[NW];				/* NONE unless a number was taken */
byte next_xid = 1;
byte p_latest_completed = 0;
byte counter = 1;
byte crashes = 0;
byte round_epoch;
bool primary_down = false;	/* crashed and not yet restarted */
bool promoted = false;

/* standby */
byte rp;					/* next record to replay */
byte known;					/* bitmask: writers whose xid is known running */
byte latest_observed;
byte latest_completed;
byte sb_committed;			/* bitmask */
byte entries;				/* bitmask: replayed reservations */
byte sb_next;
bool sb_started;
bool round_open;
byte round_bound;
bool complete;
byte bound;

/* the reader's snapshot and the horizon it was given */
byte snap_xmax;
byte snap_running;			/* bitmask: running for the snapshot */
byte snap_committed;		/* bitmask: committed and visible */
bool horizon_given = false;
byte horizon;

#define BIT(w)			(1 << (w))
#define IN(set, w)		(((set) & BIT(w)) != 0)

inline append(k, ww, l, n, ss, x)
{
	atomic {
		assert(wlen < MAXWAL);
		wal[wlen].kind = k; wal[wlen].w = ww; wal[wlen].lo = l;
		wal[wlen].nxt = n; wal[wlen].set = ss; wal[wlen].xid = x;
		wal[wlen].lc = p_latest_completed;
		wlen++
	}
}

/* the primary's latestCompletedXid, at commit and abort */
inline p_complete(cw)
{
	if
	:: xid[cw] > p_latest_completed -> p_latest_completed = xid[cw]
	:: else -> skip
	fi
}

/* running transactions as PostgreSQL logs them */
inline log_runxacts()
{
	s = 0;
	for (i : 0 .. NW - 1) {
		if
		:: pstate[i] == P_XID || pstate[i] == P_HOLDS -> s = s | BIT(i)
		:: else -> skip
		fi
	}
	append(RUNXACTS, NONE, 0, 0, s, next_xid)
}

/* RecordKnownAssignedTransactionIds: every xid up to x is running or known */
inline observe(x)
{
	if
	:: x != NONE && x > latest_observed ->
		for (i : 0 .. NW - 1) {
			if
			:: xid[i] != NONE && xid[i] > latest_observed && xid[i] <= x ->
				known = known | BIT(i)
			:: else -> skip
			fi
		}
		latest_observed = x
	:: else -> skip
	fi
}

inline complete_xact(cw)
{
	known = known & ~BIT(cw);
	if
	:: xid[cw] > latest_completed -> latest_completed = xid[cw]
	:: else -> skip
	fi
}

/* start (or restart) the standby at RUNXACTS record "at" */
inline standby_start(at)
{
	known = wal[at].set;
	latest_observed = wal[at].xid - 1;
	latest_completed = wal[at].lc;
	/* pg_xact as of the start: commits before "at" */
	sb_committed = 0;
	for (i : 0 .. at - 1) {
		if
		:: wal[i].kind == COMMIT -> sb_committed = sb_committed | BIT(wal[i].w)
		:: else -> skip
		fi
	}
	entries = 0; sb_next = 0; sb_started = false;
	round_open = false; complete = false;
	rp = at + 1;
}

inline replay_one()
{
	if
	:: wal[rp].kind == NUMBERS ->
		observe(xid[wal[rp].w]);
		entries = entries | BIT(wal[rp].w);
		sb_next = wal[rp].nxt; sb_started = true
	:: wal[rp].kind == COMMIT ->
		observe(xid[wal[rp].w]);
		sb_committed = sb_committed | BIT(wal[rp].w);
		complete_xact(wal[rp].w)
	:: wal[rp].kind == ABORT ->
		observe(xid[wal[rp].w]);
		complete_xact(wal[rp].w)
	:: wal[rp].kind == RSTART ->
		round_open = true; round_bound = wal[rp].xid
	:: wal[rp].kind == LISTING ->
		entries = entries | wal[rp].set;
		sb_next = wal[rp].nxt; sb_started = true
	:: wal[rp].kind == REND ->
		if
		:: round_open && !complete -> complete = true; bound = round_bound
		:: else -> skip
		fi;
		round_open = false
	:: wal[rp].kind == RUNXACTS ->
		/*
		 * ExpireOldKnownAssignedTransactionIds(oldest running xid): known
		 * xids below it are gone (finished, or vanished in a crash), and
		 * latestCompletedXid moves up to just below it
		 */
		h = wal[rp].xid;
		for (i : 0 .. NW - 1) {
			if
			:: IN(wal[rp].set, i) && xid[i] < h -> h = xid[i]
			:: else -> skip
			fi
		}
		for (i : 0 .. NW - 1) {
			if
			:: IN(known, i) && xid[i] < h -> known = known & ~BIT(i)
			:: else -> skip
			fi
		}
		if
		:: h - 1 > latest_completed -> latest_completed = h - 1
		:: else -> skip
		fi
		/* latestObservedXid moves only with xids seen in records */
	fi;
	rp++
}

/* is writer w running for the reader's snapshot? (unassigned: yes) */
#define SNAP_RUNNING(w)	(xid[w] == NONE || xid[w] >= snap_xmax || IN(snap_running, w))
#define SNAP_VISIBLE(w)	(!SNAP_RUNNING(w) && IN(snap_committed, w))
/* TransactionIdIsInProgress on the standby, now */
#define NOW_RUNNING(w)	(xid[w] == NONE || IN(known, w) || xid[w] > latest_completed)

inline take_snapshot()
{
	snap_xmax = latest_completed + 1;
	snap_running = 0;
	snap_committed = sb_committed;
	for (i : 0 .. NW - 1) {
		if
		:: IN(known, i) && xid[i] < snap_xmax -> snap_running = snap_running | BIT(i)
		:: else -> skip
		fi
	}
}

/* horizon() for the reader's snapshot, as on the standby; may refuse */
inline compute_horizon()
{
	refused = false;
#ifndef BROKEN_NO_ROUND
	if
	:: !complete -> refused = true
	:: else -> skip
	fi;
#endif
#ifndef BROKEN_NO_PREDATES
	for (i : 0 .. NW - 1) {
		if
#ifndef BROKEN_PREDATES_ARRAY_ONLY
		:: complete && xid[i] != NONE && xid[i] < bound && SNAP_RUNNING(i) && !NOW_RUNNING(i) ->
#else
		/* only the snapshot's array, not the xids from its xmax on */
		:: complete && xid[i] != NONE && xid[i] < bound && IN(snap_running, i) && !NOW_RUNNING(i) ->
#endif
			refused = true
		:: else -> skip
		fi
	}
#endif
	if
	:: !refused && !sb_started ->
		/* the highest number the snapshot sees, plus one */
		h = 1;
		for (i : 0 .. NW - 1) {
			if
			:: lo[i] != NONE && SNAP_VISIBLE(i) && lo[i] + 1 > h -> h = lo[i] + 1
			:: else -> skip
			fi
		}
		horizon = h; horizon_given = true
	:: !refused && sb_started ->
		h = sb_next;
		for (i : 0 .. NW - 1) {
			if
			:: IN(entries, i) && SNAP_RUNNING(i) && lo[i] < h -> h = lo[i]
			:: else -> skip
			fi
		}
		horizon = h; horizon_given = true
	:: else -> skip
	fi
}

proctype writer(byte w)
{
	byte i, s, h;
	bool refused;
	if
	:: atomic { !primary_down && !promoted && pstate[w] == P_IDLE ->
		xid[w] = next_xid; next_xid++; pstate[w] = P_XID }
	:: promoted -> goto done
	fi;
	if
#ifndef BROKEN_LOG_LATER
	:: atomic { !primary_down && !promoted && pstate[w] == P_XID ->
		lo[w] = counter; counter++; pstate[w] = P_HOLDS;
		append(NUMBERS, w, lo[w], counter, 0, 0) }
#else
	/* the counter under the lock, the record after releasing it */
	:: atomic { !primary_down && !promoted && pstate[w] == P_XID ->
		lo[w] = counter; counter++; pstate[w] = P_HOLDS }
		if
		:: atomic { !primary_down && !promoted && pstate[w] == P_HOLDS ->
			append(NUMBERS, w, lo[w], counter, 0, 0) }
		:: pstate[w] == P_VANISHED || promoted -> goto done
		fi
#endif
	:: pstate[w] == P_XID -> skip	/* a transaction that takes no number */
	:: pstate[w] == P_VANISHED || promoted -> goto done
	fi;
	if
	:: atomic { !primary_down && !promoted &&
				(pstate[w] == P_XID || pstate[w] == P_HOLDS) ->
		if
		:: append(COMMIT, w, 0, 0, 0, 0); pstate[w] = P_COMMITTED; p_complete(w)
		:: append(ABORT, w, 0, 0, 0, 0); pstate[w] = P_ABORTED; p_complete(w)
		fi }
	:: pstate[w] == P_VANISHED || promoted -> skip
	fi;
done: skip
}

/*
 * The lister: a round.  The listing is taken under the stream's lock and
 * the end follows it; a round a crash interrupted is abandoned (the
 * lister dies with the server).
 */
inline log_round()
{
	if
	:: atomic { !primary_down -> append(RSTART, NONE, 0, 0, 0, next_xid); round_epoch = crashes }
	:: promoted -> round_epoch = crashes + 1	/* no round: the primary is gone */
	fi;
	if
	:: atomic { !primary_down && round_epoch == crashes ->
		s = 0;
		for (i : 0 .. NW - 1) {
			if
			:: pstate[i] == P_HOLDS -> s = s | BIT(i)
			:: else -> skip
			fi
		}
		if
		:: counter > 1 || s != 0 -> append(LISTING, NONE, 0, counter, s, 0)
		:: else -> skip		/* counter not started: not listed */
		fi;
		append(REND, NONE, 0, 0, 0, 0)
	   }
	:: round_epoch != crashes -> skip
	fi
}

proctype lister()
{
	byte rounds = 0;
	byte i, s, h;
	bool refused;
	do
	:: rounds < ROUNDS && !primary_down -> log_round(); rounds++
	:: rounds >= ROUNDS -> break
	:: promoted -> break
	od
}

proctype primary_events()
{
	byte i, s, h;
	bool refused;
	/*
	 * a running-transactions record; then a crash (after which the primary
	 * restarts and logs running transactions, or stays down for good: a
	 * promotion), another record, or nothing
	 */
	atomic { log_runxacts() }
	if
	:: atomic {
		for (i : 0 .. NW - 1) {
			if
			:: pstate[i] == P_XID || pstate[i] == P_HOLDS -> pstate[i] = P_VANISHED
			:: else -> skip
			fi
		}
		crashes++; primary_down = true
	   }
	   if
	   :: atomic { next_xid++; p_latest_completed = next_xid - 1;
		primary_down = false; log_runxacts() }
	   :: promoted = true
	   fi
	:: atomic { log_runxacts() }
	:: skip
	fi
}

/* the reader's horizon must let no committed row pass unseen */
inline check_safety()
{
	for (i : 0 .. NW - 1) {
		if
		:: pstate[i] == P_COMMITTED && lo[i] != NONE && lo[i] < horizon ->
			if
			:: !SNAP_VISIBLE(i) ->
				printf("MSC: skipped: writer %d number %d below horizon %d; standby from %d, snapshot at %d (xmax %d running %d committed %d), horizon at %d\n",
					i, lo[i], horizon, s0, p1, snap_xmax, snap_running, snap_committed, p2)
			:: else -> skip
			fi;
			assert(SNAP_VISIBLE(i))
		:: else -> skip
		fi
	}
}

/* replay up to (not including) record "upto" */
inline replay_to(upto)
{
	do
	:: rp < upto -> replay_one()
	:: else -> break
	od
}

/* every standby start, snapshot position and horizon position */
inline check_all()
{
	s0 = 0;
	do
	:: s0 < wlen ->
		if
		:: wal[s0].kind == RUNXACTS ->
			p1 = s0 + 1;
			do
			:: p1 <= wlen ->
				standby_start(s0);
				replay_to(p1);
				take_snapshot();
				p2 = p1;
				do
				:: p2 <= wlen ->
					replay_to(p2);
					horizon_given = false;
					compute_horizon();
					if
					:: horizon_given -> check_safety()
					:: else -> skip
					fi;
					p2++
				:: else -> break
				od;
				p1++
			:: else -> break
			od
		:: else -> skip
		fi;
		s0++
	:: else -> break
	od
}

init {
	byte i, s, h, s0, p1, p2, last_start;
	bool refused;
	for (i : 0 .. NW - 1) { xid[i] = NONE; lo[i] = NONE; pstate[i] = P_IDLE }
	atomic { log_runxacts() }
	atomic {
		run lister(); run primary_events();
		for (i : 0 .. NW - 1) { run writer(i) }
	}
	/* the primary's run is over */
	(_nr_pr == 1);

	d_step { check_all() }

	/* progress: a round written and replayed after the run */
	if
	:: !primary_down ->
		last_start = wlen;
		log_round();
		log_runxacts();
		d_step {
			s0 = 0;
			do
			:: s0 < last_start ->
				if
				:: wal[s0].kind == RUNXACTS ->
					standby_start(s0);
					replay_to(wlen);
					take_snapshot();
					horizon_given = false;
					compute_horizon();
					assert(horizon_given && horizon == counter)
				:: else -> skip
				fi;
				s0++
			:: else -> break
			od
		}
	:: else -> skip
	fi
}
