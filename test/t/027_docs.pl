# Copyright (c) stream_seq contributors
#
# 027_docs.pl: the documentation is followed as a newcomer would follow
# it, in order, in one fresh database: every ```sql block of README.md and
# of the files of doc/ (in the order README lists them) runs, and any
# error fails the test.  A block may say before it, in an HTML comment,
# what the runner must do instead:
#
#   <!-- doc-test: error SQLSTATE -->  the block must fail with SQLSTATE
#   <!-- doc-test: skip REASON -->      not run (it needs a standby, say)
#   <!-- doc-test: set NAME=VALUE -->   run with psql variable NAME set, as
#                                       the text says to run it (psql -v)
#   <!-- doc-test: expect               the block must run, and its output
#   LINE                                (psql -XAtq: columns separated by
#   ...                                 "|", one row a line), without its
#   -->                                 empty lines (void results), must be
#                                       these LINEs (no ">" in them)
#
# A block's output is also in the test's log when DOC_TEST_SHOW is set.
#
# Also checked: every relative link of those files reaches a file that
# exists, and an anchor in it that a heading makes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $root = source_root();
my @files = ('README.md',
	map { "doc/$_.md" } qw(usage applications consumers partitioned-streams replicas
	  operations monitoring reference how-it-works performance comparison
	  limitations tests));

my $node = new_node('docs');
$node->safe_psql('postgres', 'CREATE DATABASE docs');

# GitHub's anchor of a heading
sub slug
{
	my ($title) = @_;
	$title = lc $title;
	$title =~ s/[^\w\- ]//g;
	$title =~ s/ /-/g;
	return $title;
}

my %anchors;
foreach my $file (@files)
{
	ok(-f "$root/$file", "$file exists") or next;
	my $text = slurp_file("$root/$file");
	my $in_fence = 0;
	foreach my $line (split /\n/, $text)
	{
		$in_fence = !$in_fence if $line =~ /^```/;
		$anchors{$file}{ slug($1) } = 1 if !$in_fence && $line =~ /^#+ (.*)$/;
	}
}

foreach my $file (@files)
{
	next unless -f "$root/$file";
	my $text = slurp_file("$root/$file");
	(my $dir = $file) =~ s{[^/]*$}{};

	# links
	my $prose = $text;
	$prose =~ s/^```.*?^```//msg;
	while ($prose =~ /\[[^\]]+\]\(([^)\s]+)\)/g)
	{
		my $link = $1;
		next if $link =~ /^[a-z]+:/;
		my ($path, $anchor) = split /#/, $link, 2;
		my $target = $path eq '' ? $file : "$dir$path";
		1 while $target =~ s{[^/]+/\.\./}{};
		ok(-e "$root/$target", "$file: link $link reaches a file");
		ok($anchors{$target}{$anchor}, "$file: link $link reaches a heading")
		  if defined $anchor && $target =~ /\.md$/;
	}

	# examples, in order
	my $n = 0;
	while ($text =~ /((?:<!-- doc-test: ([^>]*?)\s*-->\n)?)```sql\n(.*?)^```/msg)
	{
		my ($marker, $sql) = ($2 // '', $3);
		$n++;
		my $what = "$file, SQL block $n";
		if ($marker =~ /^skip\b/)
		{
			note "$what skipped: $marker";
			next;
		}
		$sql = "\\set $1 $2\n$sql" if $marker =~ /^set (\w+)=(\S+)/;
		my $r = psql_result($node, $sql, 'docs');
		if ($marker =~ /^error ([0-9A-Z]{5})/)
		{
			is($r->{sqlstate} // 'no error', $1, "$what fails with $1");
		}
		else
		{
			is($r->{rc}, 0, "$what runs") or diag "$sql\n$r->{err}";
		}
		note "$what output:\n$r->{out}" if $ENV{DOC_TEST_SHOW};
		if ($marker =~ /^expect\s*\n(.*)$/s)
		{
			my @want = grep { $_ ne '' } map { s/\s+$//r } split /\n/, $1;
			my @out = grep { $_ ne "" } map { s/\s+$//r } split /\n/, $r->{out};
			is(join("\n", @out), join("\n", @want), "$what returns what the text says");
		}
	}
	cmp_ok($n, '>', 0, "$file has examples") if $file eq 'README.md';
}

done_testing();
