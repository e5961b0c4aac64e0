# activerecord_app.rb HOST PORT USER TABLE: the recipes of
# doc/applications.md for ActiveRecord 6.1 (the pg gem) on stream table
# TABLE, run by test/t/039_applications.pl through pgbouncer in transaction
# mode.  Prints one line per task ("task result"), which the test compares.
require 'active_record'

host, port, user, table = ARGV
ActiveRecord::Base.establish_connection(
  adapter: 'postgresql', host: host, port: port.to_i, username: user,
  database: 'postgres',
  # pgbouncer in transaction mode: no server-side prepared statements, no
  # session advisory locks (migrations take one)
  prepared_statements: false, advisory_locks: false
)

# The recipe: the stream column is never in an UPDATE
class Event < ActiveRecord::Base
  attr_readonly :seq
end
Event.table_name = table

def out(*words)
  puts words.map { |w| w.nil? ? 'None' : w.to_s }.join(' ')
  $stdout.flush
end

def row(id)
  e = Event.find(id)
  [e.seq, e.payload]
end

conn = ActiveRecord::Base.connection
conn.create_table(table, id: :bigint) do |t|
  t.integer :customer_id, null: false
  t.text :payload
end
conn.execute("SELECT stream_seq.enable('#{table}')")
Event.reset_column_information

# insert: the number is the placeholder 0 until commit; reload after it
ev = nil
before = nil
Event.transaction do
  ev = Event.create!(id: 1, customer_id: 1, payload: 'a')
  before = ev.reload.seq
end
out 'insert', before, ev.reload.seq

# bulk insert: insert_all, one INSERT
Event.insert_all((2..4).map { |i| { id: i, customer_id: i, payload: 'a' } })
out 'bulk', *(2..4).map { |i| row(i)[0] }

# save of a loaded row
e = Event.find(1)
e.payload = 'b'
e.save!
out 'save', *row(1)

# find_or_initialize_by + update (the ORM's merge)
Event.find_or_initialize_by(id: 1).update!(customer_id: 1, payload: 'm')
out 'merge', *row(1)

# upsert_all without the stream column: 2 conflicts, 5 is new
Event.upsert_all([{ id: 2, customer_id: 2, payload: 'u' },
                  { id: 5, customer_id: 5, payload: 'n' }], unique_by: :id)
out 'upsert', *row(2), *row(5)
begin
  loaded = Event.find(3).attributes.merge('payload' => 'p')
  Event.upsert_all([loaded], unique_by: :id)
  out 'upsert-plain', *row(3)
rescue ActiveRecord::StatementInvalid => err
  out 'upsert-plain', err.cause.result.error_field(PG::Result::PG_DIAG_SQLSTATE)
end

# paging below the horizon, 2 rows a page
cursor = 0
pages = []
8.times do
  seqs = Event.where('seq > ? AND seq < stream_seq.horizon(?)', cursor, table)
              .order(:seq).limit(2).pluck(:seq)
  next if seqs.empty?
  pages << seqs.join(',')
  cursor = seqs.last
end
out 'page', pages.join('|'), cursor.class.name.downcase
