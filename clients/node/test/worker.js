'use strict'
// A worker process of test/t/044_node_library.pl:
//   node worker.js CONNSTR NAME group|plain CONSUMER TABLE
// Applies each row of stream "ev" for CONSUMER (a group, or a plain
// consumer) into TABLE; refuses poison rows (kind "poison") and flaky rows
// on their first delivery (the table's CHECK refuses customer -1).  Prints
// one line per event; stops on SIGTERM.
const { GroupWorker, Worker } = require('../index.js')

const [connection, name, mode, consumer, table] = process.argv.slice(2)
const Kind = mode === 'plain' ? Worker : GroupWorker
const stop = new AbortController()
process.on('SIGTERM', () => stop.abort())
const say = (...a) => process.stdout.write(a.join(' ') + '\n')

const w = new Kind({
  connection, stream: 'ev', consumer, worker: name,
  pageSize: 50, leaseMs: 3000, renewMs: 1000, waitMs: 1000, dueMs: 200, reconnectMs: 50,
  async handleRow ({ seq, row, attempts }, { client, retry }) {
    if (typeof seq !== 'bigint') throw new Error('seq is not a BigInt')
    if (typeof row.id !== 'bigint' || row.seq !== seq) throw new Error(`row ${seq}: bigint columns are not BigInt`)
    if (row.payload.kind === 'poison') throw new Error(`poison row ${seq}`)
    if (row.payload.kind === 'flaky' && attempts === 0) throw new Error(`flaky row ${seq}`)
    await client.query(
      `INSERT INTO ${table} (seq, id, customer_id, payload, worker, attempts, retry) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
      [seq, row.id, row.customer_id, row.payload, name, attempts, retry])
  },
  hooks: {
    connect: () => say('connect'),
    claim: ({ slots }) => say('claim', slots.map((s) => s.slot).join(',')),
    release: () => say('release'),
    error: (e, { phase }) => say('error', phase, e.code || '-', String(e.message).split('\n')[0])
  }
})
w.run({ signal: stop.signal }).then((stats) => {
  say('stopped', JSON.stringify(stats))
  process.exit(0)
}, (e) => { say('failed', e.stack); process.exit(2) })
