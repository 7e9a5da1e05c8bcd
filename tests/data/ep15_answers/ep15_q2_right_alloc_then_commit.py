"""right: plans the pages on a copy first, then commits; free walks indices backwards"""
from collections import OrderedDict, deque

from gpucourse.checks.ep15 import page_hash


class PrefixPagedCache:
    def __init__(self, num_pages, page_size):
        self.page_size = page_size
        self.unused = deque(range(num_pages))
        self.cached = OrderedDict()
        self.by_hash = {}
        self.refs = [0] * num_pages
        self.tables = {}

    def _hashes(self, prompt):
        out, parent = [], None
        for start in range(0, len(prompt) - self.page_size + 1, self.page_size):
            parent = page_hash(parent, prompt[start:start + self.page_size])
            out.append(parent)
        return out

    def admit(self, seq, prompt):
        hashes = self._hashes(prompt)
        n_pages = (len(prompt) + self.page_size - 1) // self.page_size
        table = []
        for h in hashes:
            page = self.by_hash.get(h)
            if page is None:
                break
            table.append(page)
        hits = len(table)
        spare = [p for p in self.cached if p not in table]
        fresh = list(self.unused)[:n_pages - hits]
        evict = spare[:n_pages - hits - len(fresh)]
        if len(fresh) + len(evict) < n_pages - hits:
            raise MemoryError(seq)
        for page in table:
            self.cached.pop(page, None)
        for page in fresh:
            self.unused.popleft()
        for page in evict:
            h = self.cached.pop(page)
            del self.by_hash[h]
        table += fresh + evict
        for i, page in enumerate(table):
            self.refs[page] += 1
            if hits <= i < len(hashes):
                self.by_hash[hashes[i]] = page
        self.tables[seq] = table
        return hits * self.page_size

    def free(self, seq):
        table = self.tables[seq]
        del self.tables[seq]
        page_hash_of = {p: h for h, p in self.by_hash.items()}
        for k in range(len(table) - 1, -1, -1):
            page = table[k]
            self.refs[page] -= 1
            if not self.refs[page]:
                if page in page_hash_of:
                    self.cached[page] = page_hash_of[page]
                else:
                    self.unused.append(page)
