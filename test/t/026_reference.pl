# Copyright (c) stream_seq contributors
#
# 026_reference.pl: the Reference (doc/reference.md) against what CREATE EXTENSION
# installs, so that the two cannot drift apart.
#
#  - every function in schema stream_seq is in the Functions table, with
#    its real argument names, types and defaults and its result type (an
#    internal function may be listed as name(...));
#  - every function the table lists exists;
#  - every view is in the Views and tables table with its columns, in
#    order, and every table of the schema is named there;
#  - every setting stream_seq.* is in the Settings table, and the table
#    names none that does not exist.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('reference');
$node->safe_psql('postgres', 'CREATE EXTENSION stream_seq');

my $reference = slurp_file(source_root() . "/doc/reference.md");
my ($functions) = $reference =~ /^## Functions\n(.*?)^## /ms;
my ($objects) = $reference =~ /^## Views and tables\n(.*?)^## /ms;
my ($settings) = $reference =~ /^## Settings\n(.*?)(?:^## |\z)/ms;
ok(defined $functions && defined $objects && defined $settings,
	'doc/reference.md has its three tables');

# Argument lists and result types as PostgreSQL prints them and as the Reference
# writes them, made comparable: casts in defaults, quotes and spacing go.
sub normalize
{
	my ($text) = @_;
	# an interval default as PostgreSQL prints it, as the Reference writes it
	$text =~ s/'00:00:(\d\d)'/(0 + $1) . " seconds"/ge;
	$text =~ s/'(\d+) seconds'/$1 seconds/g;
	$text =~ s/::[a-z_ ]+(?:\[\])?//g;
	$text =~ s/"//g;
	$text =~ s/\s*\(\s*/(/g;
	$text =~ s/\s*\)/)/g;
	$text =~ s/\s+/ /g;
	$text =~ s/^\s+|\s+$//g;
	return $text;
}

# what the Reference gives in the first column of the Functions table:
# name => list of [args, result] (result undef if not given), one per
# overload it lists
my %listed;
foreach my $row ($functions =~ /^\| ([^|]*) \|/mg)
{
	while ($row =~ /`(_?[a-z_]+)\(([^`]*?)\)(?:\s*→\s*([^`]+))?`/g)
	{
		push @{ $listed{$1} }, [ $2, $3 ];
	}
}
my %overload_found;    # "name(args)" of the Reference => found installed

my @installed = split /\n/, $node->safe_psql('postgres', q{
SELECT p.proname || E'\t' || pg_get_function_arguments(p.oid) || E'\t' ||
       pg_get_function_result(p.oid)
  FROM pg_proc p WHERE p.pronamespace = 'stream_seq'::regnamespace
 ORDER BY 1});
my %exists;
foreach my $line (@installed)
{
	my ($name, $args, $result) = split /\t/, $line;
	$args //= '';
	# OUT arguments are the result's columns, which the Reference gives elsewhere
	$args = join(', ', grep { !/^OUT / } split /, /, $args);
	$exists{$name} = 1;
	my $entries = $listed{$name};
	ok(defined $entries, "Reference lists function $name");
	next unless defined $entries;
	# the overload listed with these arguments (or "..." for all)
	my ($entry) = grep {
		$_->[0] eq '...' || normalize($_->[0]) eq normalize($args)
	} @$entries;
	ok(defined $entry, "Reference: arguments of $name($args)")
	  or diag('the Reference lists: '
		  . join('; ', map { "$name($_->[0])" } @$entries));
	next unless defined $entry;
	$overload_found{"$name($entry->[0])"} = 1;
	next if $entry->[0] eq '...';
	is(normalize($entry->[1]), normalize($result),
		"Reference: result of $name($args)") if defined $entry->[1];
}
foreach my $name (sort keys %listed)
{
	ok($exists{$name}, "function $name in the Reference exists");
	foreach my $entry (@{ $listed{$name} })
	{
		ok($overload_found{"$name($entry->[0])"},
			"function $name($entry->[0]) in the Reference exists");
	}
}

# views and their columns, tables by name
my %views = map { split /\t/ } split /\n/, $node->safe_psql('postgres', q{
SELECT c.relname || E'\t' || string_agg(a.attname, ', ' ORDER BY a.attnum)
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
 WHERE c.relnamespace = 'stream_seq'::regnamespace AND c.relkind = 'v'
 GROUP BY c.relname});
foreach my $view (sort keys %views)
{
	my ($columns) = $objects =~ /view `\Q$view\E` \|[^`|]*`([^`]*)`/;
	is($columns, $views{$view}, "Reference: columns of view $view");
}
my @tables = split /\n/, $node->safe_psql('postgres', q{
SELECT c.relname FROM pg_class c
 WHERE c.relnamespace = 'stream_seq'::regnamespace AND c.relkind = 'r'
 ORDER BY 1});
foreach my $table (@tables)
{
	like($objects, qr/tables? [^|]*`\Q$table\E`/, "Reference names table $table");
}

# settings
my @gucs = split /\n/, $node->safe_psql('postgres',
	q{SELECT name FROM pg_settings WHERE name LIKE 'stream\_seq.%' ORDER BY 1});
foreach my $guc (@gucs)
{
	like($settings, qr/`\Q$guc\E`/, "Reference lists setting $guc");
}
my %is_guc = map { $_ => 1 } @gucs;
while ($settings =~ /^\| `(stream_seq\.[a-z_]+)`/mg)
{
	ok($is_guc{$1}, "setting $1 in the Reference exists");
}

done_testing();
