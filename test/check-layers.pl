#!/usr/bin/perl
# check-layers.pl [SRCDIR]: the calls between the files of src/ follow
# their layers.  The layers are the table of src/README.md (its only
# source: this script reads it, a reader reads it); each src/*.c is in
# exactly one.  From the built objects (src/*.o, "make" first): nm gives
# which file defines and which file uses each global symbol, objdump the
# function that uses it.  Fails, naming file, function and callee, when a
# file uses a symbol defined in a file of a higher layer, and when the
# uses between files form a circle (within one layer too); and when a file
# includes the header of a module of a higher layer (name.h is the header
# of name.c).  "make test"
# runs it after the build; "make check-layers" on its own.

use strict;
use warnings;

my $src = shift // 'src';
my $readme = "$src/README.md";

# the table: | N | layer | `file.c` `file.c` | what it holds |
my (%layer_of, %layer_name, @order);
open(my $fh, '<', $readme) or die "check-layers: cannot read $readme: $!\n";
while (my $line = <$fh>)
{
	next unless $line =~ /^\|\s*(\d+)\s*\|([^|]*)\|([^|]*)\|/;
	my ($n, $name, $files) = ($1, $2, $3);
	$name =~ s/^\s+|\s+$//g;
	$layer_name{$n} = $name;
	foreach my $file ($files =~ /([\w]+\.c)\b/g)
	{
		die "check-layers: $readme: $file is in layer $layer_of{$file} and in layer $n\n"
		  if exists $layer_of{$file};
		$layer_of{$file} = $n;
		push @order, $file;
	}
}
close $fh;
die "check-layers: $readme has no layer table\n" unless @order;

my $errors = 0;
my %exists = map { s{.*/}{}r => 1 } glob("$src/*.c");
foreach my $file (sort keys %exists)
{
	next if exists $layer_of{$file};
	print "$file: in no layer of $readme\n";
	$errors++;
}
foreach my $file (@order)
{
	next if $exists{$file};
	print "$file: in $readme but not in $src\n";
	$errors++;
}
exit 1 if $errors;

# the headers: a file includes the header of a module (name.h of name.c)
# of its own layer or of a layer below, never of a higher one
foreach my $path (sort(glob("$src/*.c"), glob("$src/*.h")))
{
	my $file = $path =~ s{.*/}{}r;
	my $module = $file =~ s/\.h$/.c/r;
	next unless exists $layer_of{$module};
	open(my $in, '<', $path) or die "check-layers: cannot read $path: $!\n";
	while (<$in>)
	{
		next unless /^\s*#\s*include\s+"(\w+)\.h"/;
		my $header = "$1.h";
		my $of = "$1.c";
		next unless exists $layer_of{$of} && $layer_of{$of} > $layer_of{$module};
		printf "%s: includes %s (the header of %s, of a higher layer: %d %s, above %d %s)\n",
		  $file, $header, $of, $layer_of{$of}, $layer_name{ $layer_of{$of} },
		  $layer_of{$module}, $layer_name{ $layer_of{$module} };
		$errors++;
	}
	close $in;
}

# run COMMAND, return its output lines
sub run
{
	my @cmd = @_;
	open(my $out, '-|', @cmd) or die "check-layers: cannot run $cmd[0]: $!\n";
	my @lines = <$out>;
	close $out or die "check-layers: @cmd failed\n";
	return @lines;
}

# where each global symbol is defined
my %defined_in;
foreach my $file (@order)
{
	my $obj = "$src/" . ($file =~ s/\.c$/.o/r);
	die "check-layers: $obj is missing: build first (make)\n" unless -f $obj;
	foreach (run('nm', '-g', '--defined-only', $obj))
	{
		$defined_in{$1} = $file if /^\S*\s+[A-Za-z]\s+(\S+)$/;
	}
}

# uses between files: $uses{caller file}{callee file}{symbol} = [functions]
my %uses;
foreach my $file (@order)
{
	my $obj = "$src/" . ($file =~ s/\.c$/.o/r);
	my %undefined;
	foreach (run('nm', '-u', $obj))
	{
		$undefined{$1} = 1 if /^\s*U\s+(\S+)$/;
	}
	# the function of each reference, from the relocations of the code
	my (%by, $function);
	foreach (run('objdump', '-dr', '--no-show-raw-insn', $obj))
	{
		if (/^[0-9a-f]+ <([^>]+)>:$/)
		{
			($function = $1) =~ s/\..*$//;    # foo.cold, foo.isra.0: foo
		}
		elsif (defined $function && /^\s+[0-9a-f]+:\s+R_\S+\s+(\S+?)(?:[+-]0x[0-9a-f]+)?$/)
		{
			$by{$1}{$function} = 1 if $undefined{$1};
		}
	}
	foreach my $symbol (sort keys %undefined)
	{
		my $callee = $defined_in{$symbol};
		next if !defined $callee || $callee eq $file;
		my @functions = sort keys %{ $by{$symbol} // {} };
		@functions = ('(data)') unless @functions;
		$uses{$file}{$callee}{$symbol} = \@functions;
	}
}

# every use of a file of a higher layer
my $pairs = 0;
foreach my $file (@order)
{
	foreach my $callee (sort keys %{ $uses{$file} // {} })
	{
		$pairs++;
		next unless $layer_of{$callee} > $layer_of{$file};
		foreach my $symbol (sort keys %{ $uses{$file}{$callee} })
		{
			foreach my $function (@{ $uses{$file}{$callee}{$symbol} })
			{
				printf "%s: %s calls %s (defined in %s of a higher layer: %d %s, above %d %s)\n",
				  $file, $function, $symbol, $callee,
				  $layer_of{$callee}, $layer_name{ $layer_of{$callee} },
				  $layer_of{$file}, $layer_name{ $layer_of{$file} };
				$errors++;
			}
		}
	}
}

# circles: the strongly connected components of the files (Tarjan)
my ($index, %index, %low, %on_stack, @stack, @circles) = (0);
sub connect_file
{
	my ($v) = @_;
	$index{$v} = $low{$v} = $index++;
	push @stack, $v;
	$on_stack{$v} = 1;
	foreach my $w (sort keys %{ $uses{$v} // {} })
	{
		if (!exists $index{$w})
		{
			connect_file($w);
			$low{$v} = $low{$w} if $low{$w} < $low{$v};
		}
		elsif ($on_stack{$w})
		{
			$low{$v} = $index{$w} if $index{$w} < $low{$v};
		}
	}
	return unless $low{$v} == $index{$v};
	my @component;
	my $w;
	do
	{
		$w = pop @stack;
		$on_stack{$w} = 0;
		push @component, $w;
	} while ($w ne $v);
	push @circles, [ sort @component ] if @component > 1;
}
foreach my $file (@order)
{
	connect_file($file) unless exists $index{$file};
}

# one circle through the files of a component, by breadth-first search
# from its first file back to itself
foreach my $component (@circles)
{
	my %in = map { $_ => 1 } @$component;
	my $start = $component->[0];
	my (%from, @queue);
	@queue = ($start);
	my %seen = ($start => 1);
	my $found;
	while (defined(my $v = shift @queue))
	{
		foreach my $w (sort keys %{ $uses{$v} })
		{
			next unless $in{$w};
			if ($w eq $start) { $found = $v; last; }
			next if $seen{$w}++;
			$from{$w} = $v;
			push @queue, $w;
		}
		last if defined $found;
	}
	my @path = ($start);
	for (my $v = $found; $v ne $start; $v = $from{$v})
	{
		unshift @path, $v;
	}
	unshift @path, $start;
	print "circle between the files ", join(', ', @$component), ": ",
	  join(' -> ', @path), "; their calls between them:\n";
	foreach my $x (@$component)
	{
		foreach my $y (grep { $in{$_} } sort keys %{ $uses{$x} })
		{
			foreach my $symbol (sort keys %{ $uses{$x}{$y} })
			{
				printf "  %s: %s calls %s (defined in %s)\n", $x, $_, $symbol, $y
				  foreach @{ $uses{$x}{$y}{$symbol} };
			}
		}
	}
	$errors++;
}

if ($errors)
{
	print "check-layers: the calls between the files of $src/ do not follow the layers of $readme\n";
	exit 1;
}
printf "check-layers: %d files in %d layers, %d pairs of files with calls, none upward, no circle, no header of a higher layer included\n",
  scalar(@order), scalar(keys %layer_name), $pairs;
