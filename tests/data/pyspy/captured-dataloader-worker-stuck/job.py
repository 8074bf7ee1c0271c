import torch, time
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 100
    def __getitem__(self, i):
        if i == 5: time.sleep(1000)
        return torch.zeros(2)
dl = DataLoader(D(), num_workers=2, batch_size=2)
for b in dl: pass
