'use strict'
// node producer.js CONNSTR: inserts 3 rows into stream "ev" in one
// transaction on a direct connection and prints the numbers its commit
// got, by lastNumbers(), with their JavaScript type.
const pg = require('pg')
const { lastNumbers } = require('../index.js')

async function main () {
  const client = new pg.Client(process.argv[2])
  await client.connect()
  const before = await lastNumbers(client, 'ev')
  await client.query('BEGIN')
  await client.query(`INSERT INTO ev (customer_id, payload)
                      SELECT 1, '{"kind": "order"}' FROM generate_series(1, 3)`)
  await client.query('COMMIT')
  const n = await lastNumbers(client, 'ev')
  console.log(`before ${before.first} ${before.last}`)
  console.log(`after ${n.first} ${n.last} ${typeof n.first} ${typeof n.last}`)
  await client.end()
}
main().catch((e) => { console.error(e); process.exit(1) })
