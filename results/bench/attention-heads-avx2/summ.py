import json,glob,statistics as st,sys,collections
d=sys.argv[1] if len(sys.argv)>1 else '.'
R=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(d+'/*.json')):
    name=f.split('/')[-1][:-5]
    dt,th,blk,k,v=name.split('-')
    m=json.load(open(f))['models'][0]
    for c in m['cases']:
        R[(dt,th)][(v,c['name'],'us')].append(c['median_wall_us'])
        R[(dt,th)][(v,c['name'],'r')].append(c['ratio_wall_vs_1_token'])
    R[(dt,th)][(v,'floor','r')].append(m['one_token_vs_weight_read'])
for key in sorted(R):
    print(key)
    for case in ['1-token','chunk K=2','chunk K=4','chunk K=8','tree 3,2,1']:
        b=R[key][('base',case,'r')]; n=R[key][('new',case,'r')]
        bu=R[key][('base',case,'us')]; nu=R[key][('new',case,'us')]
        print(f"  {case:11s} ratio base {min(b):.2f}-{max(b):.2f} new {min(n):.2f}-{max(n):.2f} | us base {st.median(bu):.0f} new {st.median(nu):.0f} new/base {st.median(nu)/st.median(bu):.3f}")
    print(f"  1-token/floor base {min(R[key][('base','floor','r')]):.2f}-{max(R[key][('base','floor','r')]):.2f} new {min(R[key][('new','floor','r')]):.2f}-{max(R[key][('new','floor','r')]):.2f}")
