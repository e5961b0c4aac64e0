# django_app.py DSN TABLE: the recipes of doc/applications.md for Django
# 3.2 (psycopg 2) on stream table TABLE, run by test/t/039_applications.pl
# through pgbouncer in transaction mode.  Prints one line per task ("task
# result"), which the test compares.
import sys

import django
from django.conf import settings

dsn, table = sys.argv[1], sys.argv[2]
conn = dict(kv.split("=", 1) for kv in dsn.split())
settings.configure(
    INSTALLED_APPS=[],
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": conn["dbname"], "USER": conn["user"],
        "HOST": conn["host"], "PORT": conn["port"],
        # pgbouncer in transaction mode: no cursors that outlive a transaction
        "DISABLE_SERVER_SIDE_CURSORS": True,
    }},
)
django.setup()

from django.db import connection, models, transaction  # noqa: E402
from django.db.models.expressions import RawSQL  # noqa: E402
from django.db.utils import DatabaseError  # noqa: E402


# The recipe: save() of a loaded row updates every column but the stream
# column, which only stream_seq writes.
class StreamModel(models.Model):
    class Meta:
        abstract = True

    stream_column = "seq"

    def save(self, *args, **kwargs):
        if not self._state.adding and kwargs.get("update_fields") is None:
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields
                if not f.primary_key and f.name != self.stream_column]
        super().save(*args, **kwargs)


class Event(StreamModel):
    id = models.BigIntegerField(primary_key=True)
    customer_id = models.IntegerField()
    payload = models.TextField(null=True)
    seq = models.BigIntegerField(null=True, editable=False)   # stream_seq's

    class Meta:
        app_label = "apps"
        db_table = table


# A plain model of the same table, without the recipe
class PlainEvent(models.Model):
    id = models.BigIntegerField(primary_key=True)
    customer_id = models.IntegerField()
    payload = models.TextField(null=True)
    seq = models.BigIntegerField(null=True)

    class Meta:
        app_label = "apps"
        db_table = table
        managed = False


def row(id_):
    e = Event.objects.get(id=id_)
    return e.seq, e.payload


def out(*words):
    print(" ".join(str(w) for w in words), flush=True)


# DDL: the model's table (as a migration creates it), made a stream
with connection.schema_editor() as editor:
    editor.create_model(Event)
with connection.cursor() as c:
    c.execute("SELECT stream_seq.enable(%s)", [table])

# insert: Django's INSERT writes seq = NULL (it names every column), so
# the number is NULL until commit (then written by an update); read it after
with transaction.atomic():
    ev = Event.objects.create(id=1, customer_id=1, payload="a")
    ev.refresh_from_db(fields=["seq"])
    before = ev.seq
ev.refresh_from_db(fields=["seq"])
out("insert", before, ev.seq)

# bulk insert
with transaction.atomic():
    Event.objects.bulk_create(
        [Event(id=i, customer_id=i, payload="a") for i in (2, 3, 4)])
out("bulk", *Event.objects.filter(id__in=[2, 3, 4]).order_by("id")
    .values_list("seq", flat=True))

# save of a loaded row, with the recipe and with the plain model (which
# writes the number back as it was read)
with transaction.atomic():
    e = Event.objects.get(id=1)
    e.payload = "b"
    e.save()
out("save", *row(1))
with transaction.atomic():
    e = PlainEvent.objects.get(id=1)
    e.payload = "c"
    e.save()
out("save-plain", *row(1))

# update_or_create of a loaded row (the ORM's merge)
with transaction.atomic():
    Event.objects.update_or_create(id=1, defaults={"customer_id": 1,
                                                   "payload": "m"})
out("merge", *row(1))

# upsert: update_or_create of a row that exists (2) and one that does not
# (5); Django 3.2's bulk_create has no update_conflicts
with transaction.atomic():
    Event.objects.update_or_create(id=2, defaults={"customer_id": 2,
                                                   "payload": "u"})
    Event.objects.update_or_create(id=5, defaults={"customer_id": 5,
                                                   "payload": "n"})
out("upsert", *row(2), *row(5))

# paging below the horizon, 2 rows a page
cursor, pages = 0, []
while True:
    seqs = list(Event.objects
                .filter(seq__gt=cursor,
                        seq__lt=RawSQL("stream_seq.horizon(%s)", [table]))
                .order_by("seq").values_list("seq", flat=True)[:2])
    if not seqs:
        break
    pages.append(",".join(str(n) for n in seqs))
    cursor = seqs[-1]
out("page", "|".join(pages), type(cursor).__name__)

# save of an object created before the commit (its seq still None): with
# the recipe; the plain model would write NULL over the number
with transaction.atomic():
    stale = Event.objects.create(id=6, customer_id=6, payload="s")
plain = PlainEvent(id=6, customer_id=6, payload="v", seq=None)
plain._state.adding = False     # as if loaded before the commit
try:
    with transaction.atomic():
        plain.save()
    out("save-stale-plain", "accepted")
except DatabaseError as e:
    out("save-stale-plain", e.__cause__.pgcode)
stale.payload = "t"
stale.save()
out("save-stale", *row(6))
