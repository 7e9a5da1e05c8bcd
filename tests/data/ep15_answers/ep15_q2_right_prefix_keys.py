"""right: by_hash keyed by the tuple of every token up to the page's end (a chain without page_hash)"""
from collections import OrderedDict, deque



class PrefixPagedCache:
    def __init__(self, num_pages, page_size):
        self.page_size = page_size
        self.unused = deque(range(num_pages))
        self.cached = OrderedDict()
        self.by_hash = {}
        self.hash_of = {}
        self.refs = [0] * num_pages
        self.tables = {}

    def admit(self, seq, prompt):
        size, hashes, parent = self.page_size, [], None
        for i in range(len(prompt) // size):
            hashes.append(tuple(prompt[:(i + 1) * size]))
        found = []
        for h in hashes:
            if h not in self.by_hash:
                break
            found.append(self.by_hash[h])
        need = -(-len(prompt) // size) - len(found)
        if need > len(self.unused) + len([p for p in self.cached if p not in found]):
            raise MemoryError(f"{seq} needs {need} more pages")
        for page in found:
            self.cached.pop(page, None)
            self.refs[page] += 1
        table = list(found)
        for i in range(len(found), len(found) + need):
            if self.unused:
                page = self.unused.popleft()
            else:
                page, old = self.cached.popitem(last=False)
                del self.by_hash[old], self.hash_of[page]
            self.refs[page] += 1
            table.append(page)
            if i < len(hashes):
                self.by_hash[hashes[i]], self.hash_of[page] = page, hashes[i]
        self.tables[seq] = table
        return len(found) * size

    def free(self, seq):
        for page in reversed(self.tables.pop(seq)):
            self.refs[page] -= 1
            if self.refs[page] == 0:
                if page in self.hash_of:
                    self.cached[page] = self.hash_of[page]
                else:
                    self.unused.append(page)
