$p0s0 << EOD
0.1 0.41688 0.41688 8.53965
0.25 0.0864041 0.0864041 12.3902
0.5 0.0410367 0.0410367 9.31834
1 0.0418006 0.0418006 8.05857
2 0.0411701 0.0411701 7.33773
EOD
$p0s1 << EOD
0.1 0.638158 0.638158 4.29751
0.25 0.381313 0.381313 3.80444
0.5 0.178392 0.178392 2.68283
1 0.105 0.105 1.87489
2 0.0975 0.0975 1.9737
EOD
$p1s0 << EOD
0.1 0.41688 0.41688 8.53965
0.25 0.0864041 0.0864041 12.3902
0.5 0.0410367 0.0410367 9.31834
1 0.0418006 0.0418006 8.05857
2 0.0411701 0.0411701 7.33773
EOD
$p1s1 << EOD
0.1 0.638158 0.638158 4.29751
0.25 0.381313 0.381313 3.80444
0.5 0.178392 0.178392 2.68283
1 0.105 0.105 1.87489
2 0.0975 0.0975 1.9737
EOD
set terminal pngcairo size 1200,500 noenhanced
set output 'docs/reuse-llamacpp.png'
set key top right
set grid
set multiplot layout 1,2 title 'llamacpp: plan reuse under the same synthetic traffic (every row checked against the reference)'
set xlabel 'arrival rate (requests / tick)'
set ylabel 'reused plans / plans; dashed: the most the rule allows'
plot $p0s0 using 1:2 with linespoints lw 2 lc 1 title 'kv_unified=0,graph_reuse=1', $p0s0 using 1:3 with lines dt 2 lc 1 notitle, $p0s1 using 1:2 with linespoints lw 2 lc 2 title 'kv_unified=1,graph_reuse=1', $p0s1 using 1:3 with lines dt 2 lc 2 notitle
set xlabel 'arrival rate (requests / tick)'
set ylabel 'plan building, % of decode time'
plot $p1s0 using 1:4 with linespoints lw 2 lc 1 title 'kv_unified=0,graph_reuse=1', $p1s1 using 1:4 with linespoints lw 2 lc 2 title 'kv_unified=1,graph_reuse=1'
unset multiplot
