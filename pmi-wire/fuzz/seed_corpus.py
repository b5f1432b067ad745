#!/usr/bin/env python3
"""Seeds corpus/<target>/ from the recorded fixtures (one file per message) plus a few
hand-written messages the recordings lack (spawn, publish, abort, escapes, tags)."""
import glob
import hashlib
import os

here = os.path.dirname(os.path.abspath(__file__))
fixtures = os.path.join(here, '..', 'tests', 'fixtures')


def save(target, data):
    d = os.path.join(here, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), 'wb') as f:
        f.write(data)


def split(stream):
    """v1 lines until a pmi_version=2 init line, then 6-byte-prefixed frames."""
    v1, v2, rest = [], [], stream
    while rest:
        if rest.startswith(b'cmd=') or rest.startswith(b'mcmd='):
            line, _, rest = rest.partition(b'\n')
            v1.append(line + b'\n')
            if b'pmi_version=2' in line:
                break
        else:
            break
    while len(rest) >= 6:
        n = int(rest[:6].strip())
        v2.append(rest[: 6 + n])
        rest = rest[6 + n:]
    return v1, v2


for path in glob.glob(os.path.join(fixtures, '*', 'rank*.c2s')) + glob.glob(
        os.path.join(fixtures, '*', 'rank*.s2c')):
    side = 'request' if path.endswith('.c2s') else 'response'
    data = open(path, 'rb').read()
    v1, v2 = split(data)
    for m in v1:
        save('v1_' + side, m)
    for m in v2:
        save('v2_' + side, m)

for m in [
    b'mcmd=spawn\nnprocs=2\nexecname=/bin/a b\ntotspawns=2\nspawnssofar=1\nargcnt=1\narg1=x y\n'
    b'preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$\ninfo_num=1\n'
    b'info_key_0=wdir\ninfo_val_0=/tmp\nendcmd\nmcmd=spawn\nnprocs=1\nexecname=b\ntotspawns=2\n'
    b'spawnssofar=2\narg1=q\nargcnt=1\npreput_num=0\ninfo_num=0\nendcmd\n',
    b'cmd=publish_name service=svc port=tag#0$\n',
    b'cmd=unpublish_name service=svc\n',
    b'cmd=lookup_name service=svc\n',
    b'cmd=abort exitcode=3 message=bad_thing\n',
    b'cmd=abort exit_code=3 error_msg=x\n',
    b'cmd=barrier_in group=WORLD:7\n',
    b'cmd=get_universe_size\n',
    b'cmd=singinit pmi_version=1 pmi_subversion=1 stdio=yes authtype=none\n',
    b'cmd=getbyidx kvsname=k idx=3\n',
    b'cmd=put kvsname=k key=a value=with spaces = and more\n',
]:
    save('v1_request', m)
for m in [
    b'cmd=spawn_result rc=0 errcodes=0,0,1\n',
    b'cmd=lookup_result rc=0 port=tag#0$\n',
    b'cmd=lookup_result rc=1 msg=service_not_found\n',
    b'cmd=publish_result rc=0 info=ok\n',
    b'cmd=unpublish_result rc=0\n',
    b'cmd=universe_size rc=0 size=4\n',
    b'cmd=barrier_out rc=0 tag=7\n',
    b'cmd=singinit_info versionok=yes stdio=no kvsname=kvs_1\n',
    b'cmd=getbyidx_results rc=0 nextidx=4 key=a val=b\n',
    b'cmd=get_result rc=-1 msg=key_x_not_found value=unknown\n',
]:
    save('v1_response', m)


def frame(body, left=True):
    n = str(len(body)).encode()
    return (n.ljust(6) if left else n.rjust(6)) + body


for b in [
    b'cmd=spawn;ncmds=2;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#0$;'
    b'subcmd=/bin/a;maxprocs=2;argc=2;argv0=x;argv1=y;;z;infokeycount=1;infokey0=wdir;'
    b'infoval0=/tmp;subcmd=b;maxprocs=1;argc=0;infokeycount=0;',
    b'cmd=name-publish;name=svc;port=p;infokeycount=0;',
    b'cmd=name-unpublish;name=svc;',
    b'cmd=name-lookup;name=svc;',
    b'cmd=abort;isworld=TRUE;msg=oops;',
    b'cmd=abort;exitcode=2;message=oops;',
    b'cmd=job-connect;jobid=j;',
    b'cmd=job-disconnect;jobid=j;',
    b'cmd=kvs-get;thrid=0x1;jobid=j;srcid=-1;key=k;',
    b'cmd=fullinit;pmijobid=12.0;pmirank=3;threaded=true;\0\0\0\0\0\0',
]:
    save('v2_request', frame(b))
    save('v2_request', frame(b, left=False))
for b in [
    b'cmd=spawn-response;rc=0;jobid=kvs_2;nerrs=2;errcodes=0,0;',
    b'cmd=name-lookup-response;rc=0;found=TRUE;port=p;value=p;',
    b'cmd=name-lookup-response;rc=1;found=FALSE;errmsg=not found;',
    b'cmd=name-publish-response;rc=0;',
    b'cmd=name-unpublish-response;rc=0;',
    b'cmd=job-connect-response;rc=0;kvscopy=FALSE;',
    b'cmd=job-disconnect-response;rc=0;',
    b'cmd=fullinit-response;rc=0;rank=1;size=2;appnum=0;spawner-jobid=kvs_1;debugged=FALSE;pmiverbose=TRUE;',
    b'cmd=kvs-get-response;thrid=7;rc=0;found=TRUE;value=a;;b;',
]:
    save('v2_response', frame(b))
