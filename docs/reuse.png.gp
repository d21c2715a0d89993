$accept0 << EOD
0 0.983413 0.983413 5.54284
0.2 0.982115 0.982115 5.95094
0.4 0.980149 0.980149 6.56206
0.6 0.977392 0.977392 7.40593
0.8 0.977361 0.977361 7.41536
1 0.972625 0.972625 8.82977
EOD
$accept1 << EOD
0 0.983413 0.983413 0.548163
0.2 0.982115 0.982115 0.203275
0.4 0.980149 0.980149 0.589182
0.6 0.977392 0.977392 0.502769
0.8 0.977361 0.977361 0.586918
1 0.972625 0.972625 0.691839
EOD
$accept2 << EOD
0 0.9954 0.9954 0.547335
0.2 0.996709 0.996709 0.202259
0.4 0.995403 0.995403 0.588128
0.6 0.995906 0.995906 0.501488
0.8 0.996116 0.996116 0.585622
1 0.995703 0.995703 0.690248
EOD
$accept3 << EOD
0 0.999935 0.999935 0.0230709
0.2 0.999933 0.999933 0.0235721
0.4 0.999928 0.999928 0.0254071
0.6 0.999914 0.999914 0.0304419
0.8 0.999885 0.999885 0.040527
1 0.999857 0.999857 0.0503996
EOD
$arrival0 << EOD
0.1 0.978238 0.978238 7.14853
0.25 0.975846 0.975846 7.87239
0.5 0.977392 0.977392 7.40593
1 0.977338 0.977338 7.42219
2 0.978251 0.978251 7.1448
EOD
$arrival1 << EOD
0.1 0.978238 0.978238 0.909526
0.25 0.975846 0.975846 0.90872
0.5 0.977392 0.977392 0.502769
1 0.977338 0.977338 0.341505
2 0.978251 0.978251 0.33578
EOD
$arrival2 << EOD
0.1 0.992746 0.992746 0.90853
0.25 0.995903 0.995903 0.907343
0.5 0.995906 0.995906 0.501488
1 0.996685 0.996685 0.340162
2 0.997037 0.997037 0.334476
EOD
$arrival3 << EOD
0.1 0.998814 0.998814 0.417917
0.25 0.999843 0.999843 0.0554037
0.5 0.999914 0.999914 0.0304419
1 0.999933 0.999933 0.023536
2 0.999935 0.999935 0.0230004
EOD
set terminal pngcairo size 1200,900 noenhanced
set output 'docs/reuse.png'
set key bottom right
set grid
set multiplot layout 2,2 title 'kvweld: plan reuse per serving policy (same traffic per point, all oracles on)'
set xlabel 'draft acceptance rate'
set ylabel 'reuse ratio (kept / decodes); dashed: ideal'
plot $accept0 using 1:2 with linespoints lw 2 lc 1 title 'fresh+rebuild', $accept0 using 1:3 with lines dt 2 lc 1 notitle, $accept1 using 1:2 with linespoints lw 2 lc 2 title 'fresh+rebind', $accept1 using 1:3 with lines dt 2 lc 2 notitle, $accept2 using 1:2 with linespoints lw 2 lc 3 title 'recycle', $accept2 using 1:3 with lines dt 2 lc 3 notitle, $accept3 using 1:2 with linespoints lw 2 lc 4 title 'paged', $accept3 using 1:3 with lines dt 2 lc 4 notitle
set xlabel 'arrival rate (requests / tick)'
set ylabel 'reuse ratio (kept / decodes); dashed: ideal'
plot $arrival0 using 1:2 with linespoints lw 2 lc 1 title 'fresh+rebuild', $arrival0 using 1:3 with lines dt 2 lc 1 notitle, $arrival1 using 1:2 with linespoints lw 2 lc 2 title 'fresh+rebind', $arrival1 using 1:3 with lines dt 2 lc 2 notitle, $arrival2 using 1:2 with linespoints lw 2 lc 3 title 'recycle', $arrival2 using 1:3 with lines dt 2 lc 3 notitle, $arrival3 using 1:2 with linespoints lw 2 lc 4 title 'paged', $arrival3 using 1:3 with lines dt 2 lc 4 notitle
set xlabel 'draft acceptance rate'
set ylabel 'plan preparation, % of decode time'
plot $accept0 using 1:4 with linespoints lw 2 lc 1 title 'fresh+rebuild', $accept1 using 1:4 with linespoints lw 2 lc 2 title 'fresh+rebind', $accept2 using 1:4 with linespoints lw 2 lc 3 title 'recycle', $accept3 using 1:4 with linespoints lw 2 lc 4 title 'paged'
set xlabel 'arrival rate (requests / tick)'
set ylabel 'plan preparation, % of decode time'
plot $arrival0 using 1:4 with linespoints lw 2 lc 1 title 'fresh+rebuild', $arrival1 using 1:4 with linespoints lw 2 lc 2 title 'fresh+rebind', $arrival2 using 1:4 with linespoints lw 2 lc 3 title 'recycle', $arrival3 using 1:4 with linespoints lw 2 lc 4 title 'paged'
unset multiplot
