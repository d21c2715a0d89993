$p0s0 << EOD
1 0.9375 0.9375 2.09478
2 0.881657 0.881657 2.12027
4 0.831169 0.831169 4.27253
8 0.473799 0.473799 11.12
16 0.122016 0.122016 10.2508
64 0.0030581 0.0030581 6.82217
256 0 0 13.9488
EOD
$p0s1 << EOD
1 0.9375 0.9375 1.5911
2 0.892216 0.892216 2.13207
4 0.855705 0.855705 2.93405
8 0.75419 0.75419 1.90212
16 0.565657 0.565657 0.475904
64 0.125 0.125 0.0749668
256 0.28 0.28 0.0381753
EOD
$p1s0 << EOD
1 0.162625 0.162625 30.8501
2 0.32526 0.32526 21.0073
4 0.473799 0.473799 11.9404
8 0.570093 0.570093 6.52894
16 0.486547 0.486547 5.30905
EOD
$p1s1 << EOD
1 0.774684 0.774684 1.78994
2 0.774359 0.774359 1.5976
4 0.75419 0.75419 2.11734
8 0.767507 0.767507 1.26391
16 0.761364 0.761364 0.958242
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
