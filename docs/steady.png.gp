$p0s0 << EOD
1 0.995682 0.995682 0.31549
2 0.993808 0.993808 0.389506
4 0.993773 0.993773 0.588459
8 0.994252 0.994252 0.542244
16 0.995208 0.995208 0.336045
EOD
$p0s1 << EOD
1 0.995682 0.995682 0.0881582
2 0.993808 0.993808 0.164258
4 0.993773 0.993773 0.0784134
8 0.994252 0.994252 0.0792434
16 0.995208 0.995208 0.0587566
EOD
$p0s2 << EOD
1 0.999136 0.999136 0.0553924
2 0.998452 0.998452 0.185056
4 0.998901 0.998901 0.0769619
8 0.999281 0.999281 0.0576146
16 0.999201 0.999201 0.0504587
EOD
$p1s0 << EOD
1 0.992214 0.992214 0.51109
2 0.992978 0.992978 0.551168
4 0.994252 0.994252 0.440143
8 0.996027 0.996027 0.344923
EOD
$p1s1 << EOD
1 0.992214 0.992214 0.14034
2 0.992978 0.992978 0.0875979
4 0.994252 0.994252 0.0737292
8 0.996027 0.996027 0.0474536
EOD
$p1s2 << EOD
1 0.998297 0.998297 0.182144
2 0.998903 0.998903 0.115532
4 0.999281 0.999281 0.0710785
8 0.999503 0.999503 0.0336517
EOD
set terminal pngcairo size 1200,500 noenhanced
set output 'docs/steady.png'
set key top right
set grid
set multiplot layout 1,2 title 'kvweld (in process): plan reuse in the steady state (every row checked against the reference)'
set xlabel 'concurrent sequences (--slots)'
set ylabel 'reused plans / plans; dashed: the most the rule allows'
plot $p0s0 using 1:2 with linespoints lw 2 lc 1 title 'policy=rebuild', $p0s0 using 1:3 with lines dt 2 lc 1 notitle, $p0s1 using 1:2 with linespoints lw 2 lc 2 title 'policy=rebind', $p0s1 using 1:3 with lines dt 2 lc 2 notitle, $p0s2 using 1:2 with linespoints lw 2 lc 3 title 'policy=rebind recycle', $p0s2 using 1:3 with lines dt 2 lc 3 notitle
set xlabel 'speculative k (tokens per sequence per step)'
set ylabel 'reused plans / plans; dashed: the most the rule allows'
plot $p1s0 using 1:2 with linespoints lw 2 lc 1 title 'policy=rebuild', $p1s0 using 1:3 with lines dt 2 lc 1 notitle, $p1s1 using 1:2 with linespoints lw 2 lc 2 title 'policy=rebind', $p1s1 using 1:3 with lines dt 2 lc 2 notitle, $p1s2 using 1:2 with linespoints lw 2 lc 3 title 'policy=rebind recycle', $p1s2 using 1:3 with lines dt 2 lc 3 notitle
unset multiplot
