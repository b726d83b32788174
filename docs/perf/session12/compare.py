import json,sys
r=json.load(open(sys.argv[1]))
from collections import defaultdict
g=defaultdict(list)
for x in r: g[(x['family'],x['dtype'],'x'.join(map(str,x['shape'])))].append(x)
print("| family | dtype | shape | dispatched | its ms | fastest variant | its ms | fastest / dispatched | host µs |")
print("|---|---|---|---|---|---|---|---|---|")
for k,v in g.items():
    d=[x for x in v if x['variant'].startswith('dispatch:')]
    o=[x for x in v if not x['variant'].startswith('dispatch:')]
    best=min(o,key=lambda x:x['kernel_ms'])
    for x in d:
        print("| %s | %s | %s | %s | %.4f | %s | %.4f | %.3f | %.1f |"%(k[0],k[1],k[2],x['variant'][9:],x['kernel_ms'],best['variant'],best['kernel_ms'],best['kernel_ms']/x['kernel_ms'],x.get('host_us') or 0))
