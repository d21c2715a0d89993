$p0s0 << EOD
1 0.9375 0.9375 1.73407
2 0.881657 0.881657 3.01355
4 0.831169 0.831169 3.3566
8 0.473799 0.473799 7.52298
16 0.122016 0.122016 7.24878
EOD
$p0s1 << EOD
1 0.9375 0.9375 1.39339
2 0.892216 0.892216 1.64513
4 0.855705 0.85906 1.37513
8 0.75419 0.759777 1.24736
16 0.565657 0.575758 0.128855
EOD
$p1s0 << EOD
1 0.162625 0.162625 7.54821
2 0.32526 0.32526 4.66756
4 0.473799 0.473799 2.5458
8 0.570093 0.570093 1.42772
EOD
$p1s1 << EOD
1 0.774684 0.779747 0.374436
2 0.774359 0.779487 0.508555
4 0.75419 0.759777 0.431638
8 0.767507 0.770308 0.384466
EOD
set terminal pngcairo size 1200,500 noenhanced
set output 'docs/steady-llamacpp.png'
set key top right
set grid
set multiplot layout 1,2 title 'llamacpp: plan reuse in the steady state (every row checked against the reference)'
set xlabel 'concurrent sequences (--slots)'
set ylabel 'reused plans / plans; dashed: the most the rule allows'
plot $p0s0 using 1:2 with linespoints lw 2 lc 1 title 'kv_unified=0,graph_reuse=1', $p0s0 using 1:3 with lines dt 2 lc 1 notitle, $p0s1 using 1:2 with linespoints lw 2 lc 2 title 'kv_unified=1,graph_reuse=1', $p0s1 using 1:3 with lines dt 2 lc 2 notitle
set xlabel 'speculative k (tokens per sequence per step)'
set ylabel 'reused plans / plans; dashed: the most the rule allows'
plot $p1s0 using 1:2 with linespoints lw 2 lc 1 title 'kv_unified=0,graph_reuse=1', $p1s0 using 1:3 with lines dt 2 lc 1 notitle, $p1s1 using 1:2 with linespoints lw 2 lc 2 title 'kv_unified=1,graph_reuse=1', $p1s1 using 1:3 with lines dt 2 lc 2 notitle
unset multiplot
