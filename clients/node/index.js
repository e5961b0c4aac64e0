'use strict'
/**
 * stream-seq-worker: the consumer loop of stream_seq (doc/consumers.md)
 * for node-postgres, as a library.
 *
 * GroupWorker works a share of a consumer group's slots; Worker works a
 * plain consumer.  Both keep no session state between transactions (no
 * named prepared statements, no LISTEN, no temporary tables, no SET), so
 * they run through pgbouncer in transaction mode.
 *
 * Numbers (seq, token, position, horizon) are BigInt everywhere, and so
 * are the bigint columns of the rows it hands to the handler.
 */

const net = require('net')
const pg = require('pg')

const LEASE_LOST = 'SS001'
const RETRY_PAGE = new Set(['40001', '40P01'])
const QUERY_CANCELED = '57014'
const INT8 = 20

/**
 * The parsers of the rows' columns: bigint as BigInt (node-postgres gives
 * a string; a Number is exact only up to 2^53), every other type as
 * node-postgres parses it.  Used for the reads only.
 */
const ROW_TYPES = {
  getTypeParser (oid, format) {
    if (oid === INT8 && format !== 'binary') return (v) => BigInt(v)
    return pg.types.getTypeParser(oid, format)
  }
}

/** The request code of a cancel request (protocol "CancelRequest"). */
const CANCEL_REQUEST_CODE = 80877102

/**
 * Sends a cancel request for the query client is running, to the server
 * (or pooler) it is connected to, by the connection's cancel key, and
 * resolves once the other side has closed the socket, which it does when
 * it has handled the request (at most 5 s).  Waiting for that matters:
 * pgbouncer before 1.20 exits on a cancel connection that its client
 * closes first (pgbouncer issue 801), as a process that stops right after
 * asking does.  Sent in clear, as libpq does.
 */
function sendCancel (client) {
  return new Promise((resolve) => {
    const host = client.host || 'localhost'
    const sock = host.startsWith('/')
      ? net.connect(`${host}/.s.PGSQL.${client.port}`)
      : net.connect(client.port, host)
    const timer = setTimeout(() => sock.destroy(), 5000)
    sock.on('connect', () => {
      const req = Buffer.alloc(16)
      req.writeInt32BE(16, 0)
      req.writeInt32BE(CANCEL_REQUEST_CODE, 4)
      req.writeInt32BE(client.processID, 8)
      req.writeInt32BE(client.secretKey, 12)
      sock.write(req)
    })
    sock.on('error', () => {})
    sock.on('close', () => { clearTimeout(timer); resolve() })
  })
}

/** The columns of the due() read that are not the table's own. */
const DUE_SEQ = 'stream_seq.seq'
const DUE_GONE = 'stream_seq.gone'
const DUE_ATTEMPTS = 'stream_seq.attempts'
const DUE_REASON = 'stream_seq.reason'

/**
 * @typedef {Object} Row
 * @property {bigint} seq       the row's number
 * @property {Object} row       the stream table's row: its columns by name,
 *   bigint as BigInt, the others as node-postgres parses them
 * @property {number} attempts  failures behind it (0 unless handed back by due())
 * @property {string|null} reason the reason of its last failure (due() only)
 */

/**
 * @typedef {Object} Context
 * @property {import('pg').Client} client the connection, inside the
 *   transaction that advances past the row: do the work with it
 * @property {string} worker
 * @property {number|null} slot  the slot (null: a retry from due(), or a plain consumer)
 * @property {bigint|null} token
 * @property {boolean} retry     true for a row handed back by due()
 * @property {AbortSignal} signal
 */

/**
 * @typedef {Object} Hooks  each optional; an exception in a hook is ignored
 * @property {(info: {worker: string}) => void} [connect]
 * @property {(info: {slots: {slot: number, token: bigint}[], seen: bigint}) => void} [claim]
 * @property {(info: {slot: number|null, rows: number, first: bigint, last: bigint, ms: number, retry: boolean}) => void} [page]
 * @property {(info: {seq: bigint, error: Error, attempts: number}) => void} [park]
 * @property {(info: {after: bigint, ms: number}) => void} [wait]
 * @property {(info: {code: string, slot: number|null}) => void} [retry]
 * @property {(error: Error, info: {phase: string}) => void} [error]
 * @property {(info: {worker: string}) => void} [release]
 */

/**
 * @typedef {Object} Options
 * @property {string|import('pg').ClientConfig} connection  given to new pg.Client()
 * @property {string} stream     the stream table (a regclass text: 'events', 'app.events')
 * @property {string} consumer
 * @property {string} [worker]   this worker's name (GroupWorker: required, one per process)
 * @property {(row: Row, ctx: Context) => Promise<void>|void} [handleRow]
 * @property {(rows: Row[], ctx: Context) => Promise<void>|void} [handlePage]
 * @property {number} [pageSize=100]
 * @property {number} [leaseMs=30000]     the lease claim() asks for
 * @property {number} [renewMs]           claim again after this long (default leaseMs / 3)
 * @property {number} [waitMs=10000]      the longest wait() (kept below renewMs)
 * @property {number} [dueMs=1000]        take due retries at most this often (0: every loop)
 * @property {number} [dueRows=100]
 * @property {number} [reconnectMs=100]   first pause before reconnecting (doubles, at most 5 s)
 * @property {AbortSignal} [signal]
 * @property {Hooks} [hooks]
 */

/** A promise that resolves after ms, or at once when signal aborts. */
function pause (ms, signal) {
  return new Promise((resolve) => {
    if (signal && signal.aborted) return resolve()
    const t = setTimeout(done, ms)
    function done () {
      clearTimeout(t)
      if (signal) signal.removeEventListener('abort', done)
      resolve()
    }
    if (signal) signal.addEventListener('abort', done, { once: true })
  })
}

/** Whether err means the connection (or the server) is gone. */
function connectionLost (err) {
  const c = err && err.code
  if (typeof c !== 'string' || !/^[0-9A-Z]{5}$/.test(c)) return true // ECONNRESET, "Connection terminated", ...
  return c.startsWith('08') || c === '57P01' || c === '57P02' || c === '57P03' || c === '53300'
}

/** The text of a number for a query parameter. */
const num = (v) => (v === null || v === undefined ? null : String(v))

class BaseWorker {
  /** @param {Options} opts */
  constructor (opts) {
    if (!opts || !opts.stream || !opts.consumer) throw new TypeError('stream and consumer are required')
    if (!opts.handleRow === !opts.handlePage) throw new TypeError('give one of handleRow and handlePage')
    this.opts = opts
    this.stream = opts.stream
    this.consumer = opts.consumer
    this.name = opts.worker || ''
    this.pageSize = opts.pageSize || 100
    this.leaseMs = opts.leaseMs || 30000
    this.renewMs = opts.renewMs || Math.floor(this.leaseMs / 3)
    this.waitMs = Math.min(opts.waitMs || 10000, this.renewMs)
    this.dueMs = opts.dueMs === undefined ? 1000 : opts.dueMs
    this.dueRows = opts.dueRows || 100
    this.hooks = opts.hooks || {}
    /** counters since run() started */
    this.stats = { rows: 0, pages: 0, parked: 0, retried: 0, waits: 0, reconnects: 0 }
    this._client = null
    this._broken = false
    this._waiting = false
    this._cancelling = null
    this._nextDue = 0
    this._reads = null
  }

  _hook (name, ...args) {
    const f = this.hooks[name]
    if (f) { try { f(...args) } catch (_) { /* a hook must not stop the worker */ } }
  }

  async _connect () {
    if (this._client && !this._broken) return this._client
    await this._disconnect()
    const client = new pg.Client(this.opts.connection)
    this._broken = false
    client.on('error', (err) => { this._broken = true; this._hook('error', err, { phase: 'idle' }) })
    client.on('end', () => { this._broken = true })
    try {
      await client.connect()
    } catch (err) {
      this._broken = true
      client.end().catch(() => {})
      throw err
    }
    this._client = client
    this._hook('connect', { worker: this.name })
    return client
  }

  async _disconnect () {
    const c = this._client
    this._client = null
    this._reads = null
    if (c) await c.end().catch(() => {})
  }

  /** One statement, unnamed (no server-side prepared statement is kept). */
  async _q (text, values) {
    return this._client.query(text, values)
  }

  /** A read: as _q, with the rows' columns typed by ROW_TYPES. */
  async _read (text, values) {
    return this._client.query({ text, values, types: ROW_TYPES })
  }

  /**
   * The typed reads of the stream (read_slot_rows(), read_rows(), due()
   * made the table's row type again), built from the table's qualified
   * name and its stream column, looked up once per connection and again
   * after any error (the table may have been renamed).
   */
  async _statements () {
    if (this._reads) return this._reads
    const res = await this._q(
      `SELECT format('%I.%I', n.nspname, c.relname) AS t, s.seq_column AS col
         FROM stream_seq.streams s JOIN pg_class c ON c.oid = s.stream
         JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE s.stream = $1::regclass`, [this.stream])
    if (res.rows.length === 0) throw new Error(`"${this.stream}" is not a stream table`)
    const { t, col } = res.rows[0]    // t: quoted by format('%I.%I')
    this._reads = {
      col,
      readSlot: `SELECT * FROM stream_seq.read_slot_rows(NULL::${t}, $1, $2, $3, $4)`,
      read: `SELECT * FROM stream_seq.read_rows(NULL::${t}, $1, $2)`,
      due: `SELECT d.seq AS "${DUE_SEQ}", d."row" IS NULL AS "${DUE_GONE}",
                   d.attempts AS "${DUE_ATTEMPTS}", d.reason AS "${DUE_REASON}", r.*
              FROM stream_seq.due($1, $2, $3) d,
                   LATERAL jsonb_populate_record(NULL::${t}, d."row") r
             ORDER BY d.seq`
    }
    return this._reads
  }

  /** The handler's rows of a typed read of the table's columns. */
  _rows (res) {
    const col = this._reads.col
    return res.rows.map((row) => ({ seq: row[col], row, attempts: 0, reason: null }))
  }

  async _rollback () {
    if (this._broken || !this._client) return
    try { await this._q('ROLLBACK') } catch (err) { this._broken = true }
  }

  /**
   * Cancels a wait() in progress (through the pooler, by the cancel key);
   * run() waits for the request to be handled before it returns.
   */
  _cancelWait () {
    const c = this._client
    if (!c || !this._waiting || !c.activeQuery || c.processID === null) return
    this._cancelling = sendCancel(c)
  }

  /** Runs the handler over rows. */
  async _handle (rows, ctx) {
    if (this.opts.handlePage) return this.opts.handlePage(rows, ctx)
    for (const r of rows) await this.opts.handleRow(r, ctx)
  }

  /** Whether an error from the handler must roll the whole page back. */
  _fatal (err) {
    return this._broken || (err && (err.code === LEASE_LOST || RETRY_PAGE.has(err.code)))
  }

  /**
   * Applies rows in the current transaction: the page under one savepoint;
   * if the handler fails, again row by row under savepoints of their own,
   * parking each row that fails (with the consumer's retry policy, a parked
   * row comes back through due(); at its maximum it is a dead letter).
   */
  async _apply (rows, ctx) {
    await this._q('SAVEPOINT stream_seq_page')
    try {
      await this._handle(rows, ctx)
      await this._q('RELEASE SAVEPOINT stream_seq_page')
      return
    } catch (err) {
      if (this._fatal(err)) throw err
      await this._q('ROLLBACK TO SAVEPOINT stream_seq_page')
      await this._q('RELEASE SAVEPOINT stream_seq_page')
    }
    for (const r of rows) {
      await this._q('SAVEPOINT stream_seq_row')
      try {
        await this._handle([r], ctx)
        await this._q('RELEASE SAVEPOINT stream_seq_row')
      } catch (err) {
        if (this._fatal(err)) throw err
        await this._q('ROLLBACK TO SAVEPOINT stream_seq_row')
        await this._q('RELEASE SAVEPOINT stream_seq_row')
        const reason = String((err && err.message) || err).slice(0, 500)
        await this._q('SELECT stream_seq.park($1, $2, $3, $4)',
          [this.stream, this.consumer, num(r.seq), reason])
        this.stats.parked++
        this._hook('park', { seq: r.seq, error: err, attempts: r.attempts + 1 })
      }
    }
  }

  /**
   * Takes the consumer's due retries, in an explicit transaction of their
   * own with the work (in autocommit due() would resolve them at once).
   */
  async _due (signal) {
    if (Date.now() < this._nextDue) return 0
    this._nextDue = Date.now() + this.dueMs
    const t0 = Date.now()
    const st = await this._statements()
    await this._q('BEGIN')
    try {
      const res = await this._read(st.due, [this.stream, this.consumer, this.dueRows])
      if (res.rows.length === 0) { await this._q('COMMIT'); return 0 }
      const rows = []
      for (const x of res.rows) {
        const seq = x[DUE_SEQ]
        const meta = { gone: x[DUE_GONE], attempts: x[DUE_ATTEMPTS], reason: x[DUE_REASON] }
        for (const k of [DUE_SEQ, DUE_GONE, DUE_ATTEMPTS, DUE_REASON]) delete x[k]
        if (meta.gone) {
          // retention removed the row: nothing to hand over; park it again
          await this._q('SELECT stream_seq.park($1, $2, $3, $4)',
            [this.stream, this.consumer, num(seq), 'row removed by retention'])
          this.stats.parked++
          this._hook('park', { seq, error: new Error('row removed by retention'), attempts: meta.attempts + 1 })
          continue
        }
        rows.push({ seq, row: x, attempts: meta.attempts, reason: meta.reason })
      }
      if (rows.length > 0) await this._apply(rows, { client: this._client, worker: this.name, slot: null, token: null, retry: true, signal })
      await this._q('COMMIT')
      this.stats.retried += rows.length
      if (rows.length > 0) this._hook('page', { slot: null, rows: rows.length, first: rows[0].seq, last: rows[rows.length - 1].seq, ms: Date.now() - t0, retry: true })
      return res.rows.length
    } catch (err) {
      await this._rollback()
      throw err
    }
  }

  /** Sleeps in wait() until a row after "after" is readable, or ms pass. */
  async _wait (after, ms, signal) {
    if (signal.aborted || ms <= 0) return
    const t0 = Date.now()
    this._waiting = true
    try {
      await this._q('SELECT stream_seq.wait($1, $2, $3::interval)',
        [this.stream, num(after), `${ms} milliseconds`])
    } catch (err) {
      if (!(signal.aborted && err.code === QUERY_CANCELED)) throw err
    } finally {
      this._waiting = false
    }
    this.stats.waits++
    this._hook('wait', { after, ms: Date.now() - t0 })
  }

  /**
   * Runs the worker until signal aborts: resolves (with this.stats) once
   * the page in progress is finished and the slots are released.  Lost
   * connections are reopened; other errors are reported to hooks.error and
   * the loop goes on.
   * @param {{signal?: AbortSignal}} [arg]
   */
  async run (arg = {}) {
    const signal = arg.signal || this.opts.signal || new AbortController().signal
    const onAbort = () => this._cancelWait()
    signal.addEventListener('abort', onAbort)
    let backoff = this.opts.reconnectMs || 100
    try {
      while (!signal.aborted) {
        try {
          await this._connect()
          backoff = this.opts.reconnectMs || 100
          await this._loop(signal)
        } catch (err) {
          if (signal.aborted && err.code === QUERY_CANCELED) break
          const lost = this._broken || connectionLost(err)
          this._hook('error', err, { phase: lost ? 'connection' : 'loop' })
          if (lost) {
            this.stats.reconnects++
            await this._disconnect()
            this._lostConnection()
            await pause(backoff, signal)
            backoff = Math.min(backoff * 2, 5000)
          } else {
            this._reads = null
            await pause(50, signal)
          }
        }
      }
      await this._stop()
    } finally {
      signal.removeEventListener('abort', onAbort)
      if (this._cancelling) await this._cancelling
      await this._disconnect()
    }
    return this.stats
  }

  _lostConnection () { }
  async _stop () { }
}

/**
 * A worker of a consumer group: claims its share of the slots with a
 * lease, renews it, and for each slot held reads a page, applies it and
 * advances the slot past it in one transaction.
 */
class GroupWorker extends BaseWorker {
  /** @param {Options} opts */
  constructor (opts) {
    super(opts)
    if (!this.name) throw new TypeError('worker (a name of its own) is required')
    /** @type {{slot: number, token: bigint}[]} */
    this.slots = []
    this._renewAt = 0
  }

  _lostConnection () { this._renewAt = 0 }

  async _claim () {
    // the horizon in the same statement as the claim, so before the reads
    // that follow: if they find nothing, wait() after it misses nothing
    const res = await this._q(
      `SELECT (stream_seq.horizon($1) - 1)::text AS seen,
              ARRAY(SELECT c.slot || ':' || c.token
                      FROM stream_seq.claim($1, $2, $3, $4::interval) c ORDER BY c.slot) AS slots`,
      [this.stream, this.consumer, this.name, `${this.leaseMs} milliseconds`])
    const r = res.rows[0]
    this.slots = r.slots.map((s) => { const [a, b] = s.split(':'); return { slot: Number(a), token: BigInt(b) } })
    this._renewAt = Date.now() + this.renewMs
    const seen = BigInt(r.seen)
    this._hook('claim', { slots: this.slots, seen })
    return seen
  }

  async _loop (signal) {
    while (!signal.aborted) {
      let seen
      if (Date.now() >= this._renewAt) seen = await this._claim()
      else seen = BigInt((await this._q('SELECT (stream_seq.horizon($1) - 1)::text AS seen', [this.stream])).rows[0].seen)
      let handled = await this._due(signal)
      for (const { slot, token } of this.slots) {
        if (signal.aborted) break
        try {
          handled += await this._page(slot, token, signal)
        } catch (err) {
          if (this._broken || !err.code) throw err
          if (err.code === LEASE_LOST) { this._renewAt = 0; handled++; this._hook('retry', { code: err.code, slot }); break }
          if (RETRY_PAGE.has(err.code)) { handled++; this._hook('retry', { code: err.code, slot }); continue }
          throw err
        }
      }
      if (handled === 0) {
        const until = Math.min(this._renewAt, this.dueMs ? this._nextDue : Infinity)
        await this._wait(seen, Math.min(this.waitMs, until - Date.now()), signal)
      }
    }
  }

  /** One page of a slot, applied and advanced past in one transaction. */
  async _page (slot, token, signal) {
    const t0 = Date.now()
    const st = await this._statements()
    await this._q('BEGIN')
    try {
      const res = await this._read(st.readSlot, [this.consumer, slot, num(token), this.pageSize])
      if (res.rows.length === 0) { await this._q('COMMIT'); return 0 }
      const rows = this._rows(res)
      await this._apply(rows, { client: this._client, worker: this.name, slot, token, retry: false, signal })
      const last = rows[rows.length - 1].seq
      await this._q('SELECT stream_seq.advance_slot($1, $2, $3, $4, $5)',
        [this.stream, this.consumer, slot, num(token), num(last)])
      await this._q('COMMIT')
      this.stats.rows += rows.length
      this.stats.pages++
      this._hook('page', { slot, rows: rows.length, first: rows[0].seq, last, ms: Date.now() - t0, retry: false })
      return rows.length
    } catch (err) {
      await this._rollback()
      throw err
    }
  }

  /** Gives the slots back (a fresh connection if the last one was lost). */
  async _stop () {
    for (let i = 0; i < 3; i++) {
      try {
        await this._connect()
        await this._q('SELECT stream_seq.release($1, $2, $3)', [this.stream, this.consumer, this.name])
        this.slots = []
        this._hook('release', { worker: this.name })
        return
      } catch (err) {
        this._hook('error', err, { phase: 'release' })
        if (this._broken || connectionLost(err)) await this._disconnect()
        await pause(100 * (i + 1))
      }
    }
  }
}

/**
 * A worker of a plain consumer: reads a page after the consumer's
 * position, applies it and advances past it in one transaction.  Two
 * workers of one consumer take turns (the second gets SS001 and reads
 * again); use a group to share the work.
 */
class Worker extends BaseWorker {
  async _loop (signal) {
    while (!signal.aborted) {
      let handled = await this._due(signal)
      const r = await this._page(signal)
      handled += r.rows
      if (handled === 0) {
        const until = this.dueMs ? this._nextDue - Date.now() : this.waitMs
        await this._wait(r.seen, Math.min(this.waitMs, until), signal)
      }
    }
  }

  async _page (signal) {
    const t0 = Date.now()
    const st = await this._statements()
    await this._q('BEGIN')
    try {
      // the horizon before the read: every row below it is visible to it
      const seen = BigInt((await this._q('SELECT (stream_seq.horizon($1) - 1)::text AS seen', [this.stream])).rows[0].seen)
      const res = await this._read(st.read, [this.consumer, this.pageSize])
      if (res.rows.length === 0) { await this._q('COMMIT'); return { rows: 0, seen } }
      const rows = this._rows(res)
      await this._apply(rows, { client: this._client, worker: this.name, slot: null, token: null, retry: false, signal })
      const last = rows[rows.length - 1].seq
      await this._q('SELECT stream_seq.advance($1, $2, $3)', [this.stream, this.consumer, num(last)])
      await this._q('COMMIT')
      this.stats.rows += rows.length
      this.stats.pages++
      this._hook('page', { slot: null, rows: rows.length, first: rows[0].seq, last, ms: Date.now() - t0, retry: false })
      return { rows: rows.length, seen }
    } catch (err) {
      await this._rollback()
      if (!this._broken && err.code && (err.code === LEASE_LOST || RETRY_PAGE.has(err.code))) {
        this._hook('retry', { code: err.code, slot: null })
        return { rows: 1, seen: 0n }
      }
      throw err
    }
  }
}

/**
 * The lowest and highest number of this session's last transaction that
 * committed rows to the stream (stream_seq.last_numbers(), 0.6.0), as
 * BigInt, or nulls.  The answer is kept in the server backend: call it on
 * a connection of your own (a direct connection, or session pooling), not
 * through a pooler in transaction mode.
 * @param {import('pg').ClientBase} client
 * @param {string} stream
 * @returns {Promise<{first: bigint|null, last: bigint|null}>}
 */
async function lastNumbers (client, stream) {
  const res = await client.query(
    'SELECT first::text AS first, last::text AS last FROM stream_seq.last_numbers($1)', [stream])
  const r = res.rows[0]
  return { first: r.first === null ? null : BigInt(r.first), last: r.last === null ? null : BigInt(r.last) }
}

module.exports = { GroupWorker, Worker, lastNumbers, LEASE_LOST }
